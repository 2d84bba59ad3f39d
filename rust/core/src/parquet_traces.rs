//! Native-schema Parquet trace files read by the `parquet` crate, straight into the column
//! buffers [`ArrowTraces`](crate::arrow_cols::ArrowTraces) grades (feature `parquet`).
//!
//! Why not pyarrow: reading the 1M-trace benchmark file on one thread took pyarrow 5.3 CPU s
//! and this crate 3.4 (its string builder grows no buffer twice, and no Python object is made
//! per batch), and on two cores reading competes with grading for the same CPU.
//!
//! [`ParquetTraceFile::open`] takes only files it reads exactly as the pyarrow path does: the
//! native schema in its own types (`string`/`large_string`, `bool`, `uint64`, `uint32`,
//! `double`, (large) lists of structs, `map<string, string>`), compressed with a codec built
//! in. Anything else is refused with the reason, and the caller reads that file with pyarrow
//! (which also casts other integer types). A batch whose values the fast path does not take
//! (a null struct in a list, a null map entry) is refused by [`raw_traces`] the same way.
use std::fs::File;
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::{
    Array, BooleanArray, GenericListArray, GenericStringArray, MapArray, OffsetSizeTrait,
    RecordBatch, StructArray,
};
use arrow_schema::{DataType, Field};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder,
};
use parquet::basic::Compression;

use crate::arrow_cols::{RawArray, RawTraces};

/// The native schema's list-of-struct columns and each field's Arrow type, as
/// `regrade/native_fields.py` declares them (`S`: a string, either width).
const S: &str = "string";
const CALLS: [(&str, &str); 10] = [
    ("name", S),
    ("arguments_json", S),
    ("result", S),
    ("error", "bool"),
    ("id", S),
    ("start_time_unix_nano", "u64"),
    ("end_time_unix_nano", "u64"),
    ("turn", "u32"),
    ("agent", S),
    ("server", S),
];
const MODEL_CALLS: [(&str, &str); 8] = [
    ("model", S),
    ("input_tokens", "u64"),
    ("output_tokens", "u64"),
    ("cost", "f64"),
    ("turn", "u32"),
    ("agent", S),
    ("start_time_unix_nano", "u64"),
    ("end_time_unix_nano", "u64"),
];
const TURNS: [(&str, &str); 2] = [("user_input", S), ("final_answer", S)];

fn struct_list(name: &str) -> Option<&'static [(&'static str, &'static str)]> {
    match name {
        "calls" => Some(&CALLS),
        "model_calls" => Some(&MODEL_CALLS),
        "turns" => Some(&TURNS),
        _ => None,
    }
}

fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8)
}

fn kind_fits(kind: &str, t: &DataType) -> bool {
    match kind {
        "string" => is_string(t),
        "bool" => *t == DataType::Boolean,
        "u64" => *t == DataType::UInt64,
        "u32" => *t == DataType::UInt32,
        "f64" => *t == DataType::Float64,
        _ => false,
    }
}

/// Why `field` (a top-level column) is not read here, or `None` when it is.
fn column_problem(field: &Field) -> Option<String> {
    let (name, t) = (field.name().as_str(), field.data_type());
    let ok = match (name, t) {
        ("id" | "final_answer", t) => is_string(t),
        ("metadata", DataType::Map(entries, _)) => match entries.data_type() {
            DataType::Struct(kv) => kv.len() == 2 && kv.iter().all(|f| is_string(f.data_type())),
            _ => false,
        },
        (name, DataType::List(item) | DataType::LargeList(item)) => {
            match (struct_list(name), item.data_type()) {
                (Some(kinds), DataType::Struct(fields)) => fields.iter().all(|f| {
                    kinds.iter().any(|(n, kind)| f.name() == n && kind_fits(kind, f.data_type()))
                }),
                _ => false,
            }
        }
        _ => false,
    };
    (!ok).then(|| format!("column {name:?} of type {t} is not in the native trace schema"))
}

fn codec_built_in(c: Compression) -> bool {
    matches!(
        c,
        Compression::UNCOMPRESSED
            | Compression::SNAPPY
            | Compression::ZSTD(_)
            | Compression::LZ4
            | Compression::LZ4_RAW
            | Compression::GZIP(_)
    )
}

/// An open native-schema trace file.
pub struct ParquetTraceFile {
    file: File,
    meta: ArrowReaderMetadata,
}

impl ParquetTraceFile {
    /// Opens `path` when this reader reads it exactly; otherwise the reason it does not.
    pub fn open(path: &Path) -> Result<Self, String> {
        let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let meta = ArrowReaderMetadata::load(&file, ArrowReaderOptions::new())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let schema = meta.schema();
        if schema.fields().is_empty() {
            return Err("no columns".to_owned());
        }
        if let Some(problem) = schema.fields().iter().find_map(|f| column_problem(f)) {
            return Err(problem);
        }
        for group in meta.metadata().row_groups() {
            if let Some(c) = group.columns().iter().find(|c| !codec_built_in(c.compression())) {
                let codec = format!("{:?}", c.compression());
                let name = codec.split('(').next().unwrap_or(&codec);
                return Err(format!("codec {name} is not built in"));
            }
        }
        Ok(Self { file, meta })
    }

    /// Rows of each row group, in file order.
    #[must_use]
    pub fn row_group_rows(&self) -> Vec<u64> {
        let groups = self.meta.metadata().row_groups();
        groups.iter().map(|g| g.num_rows().max(0) as u64).collect()
    }

    /// Row group `group`'s rows from `skip` on, in record batches of up to `batch_size` rows
    /// (a fresh reader per row group, as the pyarrow path: a long-lived reader's decode
    /// buffers grow with the file).
    pub fn batches(
        &self,
        group: usize,
        skip: usize,
        batch_size: usize,
    ) -> Result<ParquetRecordBatchReader, String> {
        if group >= self.meta.metadata().num_row_groups() {
            return Err(format!("no row group {group}"));
        }
        let file = self.file.try_clone().map_err(|e| e.to_string())?;
        ParquetRecordBatchReaderBuilder::new_with_metadata(file, self.meta.clone())
            .with_row_groups(vec![group])
            .with_offset(skip)
            .with_batch_size(batch_size.max(1))
            .build()
            .map_err(|e| e.to_string())
    }
}

/// A column's validity bitmap, when it has nulls; an error when the bitmap starts mid-byte
/// (a sliced array, which a fresh read never makes).
fn validity(array: &dyn Array) -> Result<Option<&[u8]>, String> {
    match array.nulls() {
        Some(nulls) if nulls.null_count() > 0 => {
            if nulls.offset() != 0 {
                return Err("a sliced validity bitmap".to_owned());
            }
            Ok(Some(nulls.validity()))
        }
        _ => Ok(None),
    }
}

fn strings<O: OffsetSizeTrait>(a: &GenericStringArray<O>) -> Result<RawArray<'_>, String> {
    Ok(RawArray {
        len: a.len(),
        offset: 0,
        validity: validity(a)?,
        offsets: Some(a.offsets().inner().inner().as_slice()),
        large: O::IS_LARGE,
        values: Some(a.values().as_slice()),
    })
}

fn string_array(a: &dyn Array) -> Result<RawArray<'_>, String> {
    match a.data_type() {
        DataType::Utf8 => strings(a.as_string::<i32>()),
        DataType::LargeUtf8 => strings(a.as_string::<i64>()),
        t => Err(format!("a {t} column where a string is expected")),
    }
}

fn list_offsets<O: OffsetSizeTrait>(
    a: &GenericListArray<O>,
) -> Result<(RawArray<'_>, &StructArray), String> {
    let values = a.values().as_struct_opt().ok_or("a list whose items are not structs")?;
    if values.null_count() > 0 {
        return Err("a null struct in a list".to_owned());
    }
    let raw = RawArray {
        len: a.len(),
        offset: 0,
        validity: validity(a)?,
        offsets: Some(a.offsets().inner().inner().as_slice()),
        large: O::IS_LARGE,
        values: None,
    };
    Ok((raw, values))
}

fn fixed(a: &dyn Array) -> Result<RawArray<'_>, String> {
    let values = match a.data_type() {
        DataType::Boolean => {
            let bits = a.as_any().downcast_ref::<BooleanArray>().ok_or("not a boolean")?.values();
            if bits.offset() != 0 {
                return Err("a sliced boolean column".to_owned());
            }
            bits.values()
        }
        DataType::UInt64 => a.as_primitive::<arrow_array::types::UInt64Type>().values().inner(),
        DataType::UInt32 => a.as_primitive::<arrow_array::types::UInt32Type>().values().inner(),
        DataType::Float64 => a.as_primitive::<arrow_array::types::Float64Type>().values().inner(),
        t => return Err(format!("a {t} column")),
    };
    Ok(RawArray {
        len: a.len(),
        offset: 0,
        validity: validity(a)?,
        offsets: None,
        large: false,
        values: Some(values),
    })
}

/// One struct-list column (`calls`, `model_calls`, `turns`) into `out`'s fields of that name.
fn struct_list_columns<'a>(
    name: &str,
    column: &'a dyn Array,
    out: &mut RawTraces<'a>,
) -> Result<(), String> {
    let (list, items) = match column.data_type() {
        DataType::List(_) => list_offsets(column.as_list::<i32>())?,
        DataType::LargeList(_) => list_offsets(column.as_list::<i64>())?,
        t => return Err(format!("column {name:?} is a {t}")),
    };
    for (field, child) in items.fields().iter().zip(items.columns()) {
        let child = child.as_ref();
        let slot = match (name, field.name().as_str()) {
            ("calls", "name") => &mut out.call_name,
            ("calls", "arguments_json") => &mut out.call_arguments_json,
            ("calls", "result") => &mut out.call_result,
            ("calls", "error") => &mut out.call_error,
            ("calls", "id") => &mut out.call_id,
            ("calls", "start_time_unix_nano") => &mut out.call_start_time_unix_nano,
            ("calls", "end_time_unix_nano") => &mut out.call_end_time_unix_nano,
            ("calls", "turn") => &mut out.call_turn,
            ("calls", "agent") => &mut out.call_agent,
            ("calls", "server") => &mut out.call_server,
            ("model_calls", "model") => &mut out.model_call_model,
            ("model_calls", "input_tokens") => &mut out.model_call_input_tokens,
            ("model_calls", "output_tokens") => &mut out.model_call_output_tokens,
            ("model_calls", "cost") => &mut out.model_call_cost,
            ("model_calls", "turn") => &mut out.model_call_turn,
            ("model_calls", "agent") => &mut out.model_call_agent,
            ("model_calls", "start_time_unix_nano") => &mut out.model_call_start_time_unix_nano,
            ("model_calls", "end_time_unix_nano") => &mut out.model_call_end_time_unix_nano,
            ("turns", "user_input") => &mut out.turn_user_input,
            ("turns", "final_answer") => &mut out.turn_final_answer,
            (list, field) => return Err(format!("unknown field {list}.{field}")),
        };
        *slot =
            Some(if is_string(child.data_type()) { string_array(child)? } else { fixed(child)? });
    }
    let slot = match name {
        "calls" => &mut out.calls,
        "model_calls" => &mut out.model_calls,
        _ => &mut out.turns,
    };
    *slot = Some(list);
    Ok(())
}

fn metadata_columns<'a>(column: &'a dyn Array, out: &mut RawTraces<'a>) -> Result<(), String> {
    let map: &MapArray = column.as_map_opt().ok_or("metadata is not a map")?;
    let entries = map.entries();
    if entries.null_count() > 0 || map.keys().null_count() > 0 || map.values().null_count() > 0 {
        return Err("a null metadata entry".to_owned());
    }
    out.metadata = Some(RawArray {
        len: map.len(),
        offset: 0,
        validity: validity(map)?,
        offsets: Some(map.offsets().inner().inner().as_slice()),
        large: false,
        values: None,
    });
    out.metadata_key = Some(string_array(map.keys().as_ref())?);
    out.metadata_value = Some(string_array(map.values().as_ref())?);
    Ok(())
}

/// The batch's columns as [`ArrowTraces::new`](crate::arrow_cols::ArrowTraces::new) takes
/// them, borrowing its buffers; an error names what the fast path does not take.
pub fn raw_traces(batch: &RecordBatch) -> Result<RawTraces<'_>, String> {
    let mut out = RawTraces { rows: batch.num_rows(), ..RawTraces::default() };
    for (field, column) in batch.schema_ref().fields().iter().zip(batch.columns()) {
        let column = column.as_ref();
        match field.name().as_str() {
            "id" => out.id = Some(string_array(column)?),
            "final_answer" => out.final_answer = Some(string_array(column)?),
            "metadata" => metadata_columns(column, &mut out)?,
            name @ ("calls" | "model_calls" | "turns") => {
                struct_list_columns(name, column, &mut out)?;
            }
            name => return Err(format!("column {name:?} is not in the native trace schema")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{
        BooleanBuilder, ListBuilder, MapBuilder, StringBuilder, StructBuilder, UInt32Builder,
        UInt64Builder,
    };
    use arrow_array::{ArrayRef, Int64Array, StringArray};
    use arrow_schema::{Fields, Schema};
    use parquet::arrow::ArrowWriter;

    use super::*;
    use crate::arrow_cols::ArrowTraces;

    /// A call's name, arguments, error, start time and turn.
    type Call<'a> = (&'a str, Option<&'a str>, bool, u64, Option<u32>);

    fn call_fields() -> Fields {
        Fields::from(vec![
            Field::new("name", DataType::Utf8, true),
            Field::new("arguments_json", DataType::Utf8, true),
            Field::new("error", DataType::Boolean, true),
            Field::new("start_time_unix_nano", DataType::UInt64, true),
            Field::new("turn", DataType::UInt32, true),
        ])
    }

    /// Three traces: two calls with a null argument and a null turn, no calls, one call; the
    /// middle trace has metadata.
    fn batch() -> RecordBatch {
        let mut calls = ListBuilder::new(StructBuilder::from_fields(call_fields(), 4));
        let rows: [&[Call]; 3] = [
            &[("search", Some(r#"{"q":"x"}"#), false, 10, Some(1)), ("book", None, true, 20, None)],
            &[],
            &[("pay", Some("{}"), false, 30, Some(2))],
        ];
        for row in rows {
            for &(name, args, error, start, turn) in row {
                let s = calls.values();
                s.field_builder::<StringBuilder>(0).unwrap().append_value(name);
                s.field_builder::<StringBuilder>(1).unwrap().append_option(args);
                s.field_builder::<BooleanBuilder>(2).unwrap().append_value(error);
                s.field_builder::<UInt64Builder>(3).unwrap().append_value(start);
                s.field_builder::<UInt32Builder>(4).unwrap().append_option(turn);
                s.append(true);
            }
            calls.append(true);
        }
        let mut meta = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
        meta.append(true).unwrap();
        meta.keys().append_value("user");
        meta.values().append_value("u1");
        meta.append(true).unwrap();
        meta.append(true).unwrap();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec!["t1", "t2", "t3"])),
            Arc::new(calls.finish()),
            Arc::new(meta.finish()),
            Arc::new(StringArray::from(vec![Some("done"), None, Some("ok")])),
        ];
        RecordBatch::try_from_iter(
            ["id", "calls", "metadata", "final_answer"].into_iter().zip(columns),
        )
        .unwrap()
    }

    fn write(path: &Path, batch: &RecordBatch, rows_per_group: usize) {
        let props = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(rows_per_group))
            .set_compression(Compression::SNAPPY)
            .build();
        let mut w =
            ArrowWriter::try_new(File::create(path).unwrap(), batch.schema(), Some(props)).unwrap();
        w.write(batch).unwrap();
        w.close().unwrap();
    }

    fn read_all(file: &ParquetTraceFile, skip: usize) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut skip = skip;
        for (group, rows) in file.row_group_rows().into_iter().enumerate() {
            let first = skip.min(rows as usize);
            skip -= first;
            for b in file.batches(group, first, 2).unwrap() {
                let b = b.unwrap();
                let traces = ArrowTraces::new(&raw_traces(&b).unwrap()).unwrap();
                for row in 0..traces.rows() {
                    let t = traces.trace(row);
                    out.push((traces.id(row).to_owned(), format!("{t:?}")));
                }
            }
        }
        out
    }

    #[test]
    fn reads_the_rows_the_batch_holds_across_row_groups_and_skips() {
        let dir = std::env::temp_dir().join(format!("tg-pq-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("traces.parquet");
        let b = batch();
        write(&path, &b, 2);
        let file = ParquetTraceFile::open(&path).unwrap();
        assert_eq!(file.row_group_rows(), vec![2, 1]);
        let direct = ArrowTraces::new(&raw_traces(&b).unwrap()).unwrap();
        let expected: Vec<(String, String)> =
            (0..3).map(|r| (direct.id(r).to_owned(), format!("{:?}", direct.trace(r)))).collect();
        assert_eq!(read_all(&file, 0), expected);
        assert_eq!(read_all(&file, 1), expected[1..]);
        assert_eq!(read_all(&file, 2), expected[2..]);
        let t = direct.trace(0);
        assert_eq!(t.calls.len(), 2);
        assert_eq!(t.calls[1].arguments_json, None);
        assert!(t.calls[1].error);
        assert_eq!(direct.trace(1).metadata.get("user").map(String::as_str), Some("u1"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refuses_other_types_and_columns_with_the_reason() {
        let dir = std::env::temp_dir().join(format!("tg-pq-refuse-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("other.parquet");
        let ids: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
        let b = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)])),
            vec![ids],
        )
        .unwrap();
        write(&path, &b, 10);
        let err = ParquetTraceFile::open(&path).err().unwrap();
        assert!(err.contains(r#"column "id" of type Int64"#), "{err}");
        let missing = ParquetTraceFile::open(&dir.join("missing.parquet")).err().unwrap();
        assert!(missing.contains("missing.parquet"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
