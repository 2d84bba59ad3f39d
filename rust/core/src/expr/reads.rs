//! What an expression can read, decided once at compile time so that an evaluation builds
//! nothing else: the variables it names, whether it can read a call's `result_json`, and
//! whether a record (a call, a model call, `usage`) can reach an operation that needs it as
//! the `cel` crate's own map.
//!
//! Records are bound lazily (see [`super::record`]). The crate recognises its own maps by a
//! downcast it also makes on every field selection (to unwrap optionals), so a record can only
//! answer that downcast cheaply — "not a built-in map" — when nothing in the expression needs
//! it to be one: converting it to a value (a result, an error message), comparing it,
//! hashing it as a key, passing it to a function. [`Reads::records_as_maps`] is false only
//! when every record is used by selecting a field (`c.name`, `has(c.name)`, `c['name']`),
//! by `size()`, or by iterating over its keys, and every list of records by `size()`,
//! an integer index, a comprehension over it, or a `filter` whose result is used the same
//! way. Anything else (`calls[0] == x`, `[c]`, `calls.map(c, c)`, an index that may be a
//! fractional double, whose error message shows the list) makes records answer as full maps.
use cel::common::ast::{operators, ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue};

/// The field every call has; `result_json` is the only one whose value costs a parse.
pub const RESULT_JSON: &str = "result_json";

/// What evaluating an expression can read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(clippy::struct_excessive_bools)]
pub struct Reads {
    pub calls: bool,
    pub answer: bool,
    pub metadata: bool,
    pub model_calls: bool,
    pub usage: bool,
    /// Records must answer the crate's downcast as built maps (see the module docs).
    pub records_as_maps: bool,
}

/// What `e` reads; `e` is the checked tree, before the number and cost rewrites.
pub fn reads(e: &IdedExpr) -> Reads {
    let mut names = Names::default();
    names.walk(e);
    let records_as_maps = !Flow::default().allowed(e, &[]);
    Reads {
        calls: names.calls,
        answer: names.answer,
        metadata: names.metadata,
        model_calls: names.model_calls,
        usage: names.usage,
        records_as_maps,
    }
}

/// Whether evaluating `e` can read a call's `result_json`: it names the field (`.result_json`,
/// `["result_json"]`, `has(..)`) or indexes with a computed key. Otherwise the field is bound
/// to `null` unparsed: no expression that does not read it can tell (a call map's keys and
/// size are the same, and two calls' `result_json` are equal whenever their `result` is).
pub fn reads_result_json(e: &IdedExpr) -> bool {
    match &e.expr {
        Expr::Select(s) => s.field == RESULT_JSON || reads_result_json(&s.operand),
        Expr::Literal(LiteralValue::String(s)) => s.inner() == RESULT_JSON,
        // Message literals are rejected at compile time (no message type is declared).
        Expr::Literal(_) | Expr::Ident(_) | Expr::Unspecified | Expr::Struct(_) => false,
        Expr::Call(call) => {
            let computed_index = (call.func_name == operators::INDEX
                || call.func_name == operators::OPT_INDEX)
                && call.args.get(1).is_some_and(|k| !matches!(k.expr, Expr::Literal(_)));
            computed_index
                || call.target.as_deref().is_some_and(reads_result_json)
                || call.args.iter().any(reads_result_json)
        }
        Expr::Comprehension(c) => {
            [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result]
                .into_iter()
                .any(reads_result_json)
        }
        Expr::List(l) => l.elements.iter().any(reads_result_json),
        Expr::Map(m) => m.entries.iter().any(|entry| match &entry.expr {
            EntryExpr::MapEntry(me) => reads_result_json(&me.key) || reads_result_json(&me.value),
            EntryExpr::StructField(f) => reads_result_json(&f.value),
        }),
    }
}

/// The bound variables `e` names anywhere (a comprehension variable of the same name counts:
/// the answer may only be too broad).
#[derive(Default)]
#[allow(clippy::struct_excessive_bools)]
struct Names {
    calls: bool,
    answer: bool,
    metadata: bool,
    model_calls: bool,
    usage: bool,
}

impl Names {
    fn walk(&mut self, e: &IdedExpr) {
        match &e.expr {
            Expr::Ident(name) => match name.as_str() {
                "calls" => self.calls = true,
                "answer" => self.answer = true,
                "metadata" => self.metadata = true,
                "model_calls" => self.model_calls = true,
                "usage" => self.usage = true,
                _ => {}
            },
            _ => children(e).for_each(|c| self.walk(c)),
        }
    }
}

/// The direct sub-expressions of `e`.
fn children(e: &IdedExpr) -> impl Iterator<Item = &IdedExpr> {
    let v: Vec<&IdedExpr> = match &e.expr {
        Expr::Call(call) => call.target.as_deref().into_iter().chain(&call.args).collect(),
        Expr::Comprehension(c) => {
            vec![&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result]
        }
        Expr::Select(s) => vec![&s.operand],
        Expr::List(l) => l.elements.iter().collect(),
        Expr::Map(m) => m
            .entries
            .iter()
            .flat_map(|entry| match &entry.expr {
                EntryExpr::MapEntry(me) => vec![&me.key, &me.value],
                EntryExpr::StructField(f) => vec![&f.value],
            })
            .collect(),
        Expr::Struct(st) => st
            .entries
            .iter()
            .flat_map(|entry| match &entry.expr {
                EntryExpr::MapEntry(me) => vec![&me.key, &me.value],
                EntryExpr::StructField(f) => vec![&f.value],
            })
            .collect(),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Vec::new(),
    };
    v.into_iter()
}

/// What an expression evaluates to, as far as records go.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Record,
    RecordList,
    Other,
}

/// Follows records through an expression (see the module docs).
#[derive(Default)]
struct Flow {
    /// Comprehension variables in scope, innermost last, and whether each holds a record.
    scope: Vec<(String, bool)>,
}

impl Flow {
    /// Whether `e` evaluates, with every record used as allowed, to a value that is no record
    /// or list of records unless `shapes` allows it.
    fn allowed(&mut self, e: &IdedExpr, shapes: &[Shape]) -> bool {
        match self.shape(e) {
            Some(Shape::Other) => true,
            Some(shape) => shapes.contains(&shape),
            None => false,
        }
    }

    /// The shape of `e`; `None` when a record is used otherwise than allowed within it.
    fn shape(&mut self, e: &IdedExpr) -> Option<Shape> {
        match &e.expr {
            Expr::Ident(name) => Some(self.ident(name)),
            Expr::Literal(_) => Some(Shape::Other),
            // A record's fields are plain values.
            Expr::Select(s) => self.allowed(&s.operand, &[Shape::Record]).then_some(Shape::Other),
            Expr::Call(call) => {
                let global = call.target.is_none();
                if call.func_name == operators::INDEX && global && call.args.len() == 2 {
                    let (operand, index) = (&call.args[0], &call.args[1]);
                    return match self.shape(operand)? {
                        // A fractional double index fails with the list in its message.
                        Shape::RecordList => {
                            (int_typed(index) && self.allowed(index, &[])).then_some(Shape::Record)
                        }
                        Shape::Record | Shape::Other => {
                            self.allowed(index, &[]).then_some(Shape::Other)
                        }
                    };
                }
                let size =
                    call.func_name == "size" && (call.args.len() + usize::from(!global)) == 1;
                let shapes: &[Shape] = if size { &[Shape::Record, Shape::RecordList] } else { &[] };
                let ok = call.target.as_deref().is_none_or(|t| self.allowed(t, shapes))
                    && call.args.iter().all(|a| self.allowed(a, shapes));
                ok.then_some(Shape::Other)
            }
            Expr::Comprehension(c) => self.comprehension(c),
            _ => children(e).all(|c| self.allowed(c, &[])).then_some(Shape::Other),
        }
    }

    fn ident(&self, name: &str) -> Shape {
        match self.scope.iter().rev().find(|(n, _)| n == name) {
            Some((_, true)) => Shape::Record,
            Some((_, false)) => Shape::Other,
            None => match name {
                "calls" | "model_calls" => Shape::RecordList,
                "usage" => Shape::Record,
                _ => Shape::Other,
            },
        }
    }

    fn comprehension(&mut self, c: &ComprehensionExpr) -> Option<Shape> {
        let range = self.shape(&c.iter_range)?;
        if !self.allowed(&c.accu_init, &[]) {
            return None;
        }
        // Over a list of records, the (one) variable is a record; over a record, its keys.
        let record_var = range == Shape::RecordList;
        if record_var && c.iter_var2.is_some() {
            return None;
        }
        let depth = self.scope.len();
        self.scope.push((c.iter_var.clone(), record_var));
        if let Some(v) = &c.iter_var2 {
            self.scope.push((v.clone(), false));
        }
        self.scope.push((c.accu_var.clone(), false));
        let shape = if record_var && keeps_elements(c) {
            // `filter`: a list of some of the records.
            let Expr::Call(step) = &c.loop_step.expr else { unreachable!("checked") };
            (self.allowed(&c.loop_cond, &[]) && self.allowed(&step.args[0], &[]))
                .then_some(Shape::RecordList)
        } else {
            [&c.loop_cond, &c.loop_step, &c.result]
                .into_iter()
                .all(|part| self.allowed(part, &[]))
                .then_some(Shape::Other)
        };
        self.scope.truncate(depth);
        shape
    }
}

/// Whether `c` is a `filter`: from `[]`, `guard ? @result + [x] : @result` with `x` the
/// iteration variable, answering `@result`.
fn keeps_elements(c: &ComprehensionExpr) -> bool {
    let is = |e: &IdedExpr, name: &str| matches!(&e.expr, Expr::Ident(n) if n == name);
    let empty = matches!(&c.accu_init.expr, Expr::List(l) if l.elements.is_empty());
    let Expr::Call(step) = &c.loop_step.expr else { return false };
    let appends_var = |e: &IdedExpr| match &e.expr {
        Expr::Call(add) => {
            add.func_name == operators::ADD
                && add.target.is_none()
                && add.args.len() == 2
                && is(&add.args[0], &c.accu_var)
                && matches!(&add.args[1].expr, Expr::List(l)
                    if l.optional_indices.is_empty()
                        && l.elements.len() == 1
                        && is(&l.elements[0], &c.iter_var))
        }
        _ => false,
    };
    empty
        && is(&c.result, &c.accu_var)
        && step.func_name == operators::CONDITIONAL
        && step.target.is_none()
        && step.args.len() == 3
        && appends_var(&step.args[1])
        && is(&step.args[2], &c.accu_var)
}

/// Whether `e` certainly evaluates to an `int` or a `uint` (or fails), never a `double`.
fn int_typed(e: &IdedExpr) -> bool {
    int_kind(e).is_some()
}

/// `Some(true)` for an `int`, `Some(false)` for a `uint`: mixed arithmetic gives a `double`.
fn int_kind(e: &IdedExpr) -> Option<bool> {
    match &e.expr {
        Expr::Literal(LiteralValue::Int(_)) => Some(true),
        Expr::Literal(LiteralValue::UInt(_)) => Some(false),
        Expr::Call(call) => {
            let arity = call.args.len() + usize::from(call.target.is_some());
            match call.func_name.as_str() {
                "size" if arity == 1 => Some(true),
                "int" if arity == 1 && call.target.is_none() => Some(true),
                "uint" if arity == 1 && call.target.is_none() => Some(false),
                operators::NEGATE if arity == 1 => int_kind(&call.args[0]).filter(|&i| i),
                operators::ADD
                | operators::SUBSTRACT
                | operators::MULTIPLY
                | operators::DIVIDE
                | operators::MODULO
                    if arity == 2 && call.target.is_none() =>
                {
                    let (a, b) = (int_kind(&call.args[0])?, int_kind(&call.args[1])?);
                    (a == b).then_some(a)
                }
                _ => None,
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(src: &str) -> IdedExpr {
        cel::Env::stdlib().compile(src).expect("parses").expression().clone()
    }

    #[test]
    fn records_stay_lazy_only_where_no_map_is_needed() {
        for lazy in [
            "calls.all(c, c.name != '') && size(calls) < 100",
            "calls.all(c, c.duration_ms == null || c.duration_ms < 5000.0) && usage.total_tokens < 1",
            "calls[0].name == 'a' && has(calls[1].args.x) && calls[size(calls) - 1].error",
            "calls.filter(c, c.error).size() == 0 && calls.filter(c, c.turn > 1)[0].name == 'x'",
            "calls.exists(c, c['args'].x == 1) && size(calls[0]) == 10 && calls[0].size() == 10",
            "calls.map(c, c.name).exists(n, n == 'a') && model_calls.all(m, m.cost < 1.0)",
            "calls[0].all(k, k != '') && calls.all(c, calls.exists(d, d.name == c.name))",
            "[1, 2].all(c, c > 0) && calls.all(x, [x.name].all(x, x != ''))",
            "answer == '' && metadata.env == 'prod' && has(usage.cost)",
        ] {
            assert!(!reads(&tree(lazy)).records_as_maps, "{lazy}");
        }
        for mapped in [
            "calls[0] == calls[1]",
            "calls == []",
            "calls[0]",
            "calls",
            "calls.map(c, c).size() == 1",
            "[calls[0]].size() == 1",
            "calls[1.5].name == 'a'",
            "calls[c.position].name == 'a'",
            "calls[0u + 1].name == 'a'",
            "'name' in calls[0]",
            "type(usage) == map",
            "calls.filter(c, c.error) == []",
            "calls.all(c, [c].size() == 1)",
            "calls.exists(c, c == calls[0])",
            "usage + 1 == 2",
            "calls.all(i, c, c.name != '')",
            "calls[?0].name == 'a'",
            "calls[0].?name == optional.of('a')",
        ] {
            assert!(reads(&tree(mapped)).records_as_maps, "{mapped}");
        }
    }

    #[test]
    fn names_the_variables_read() {
        let r = reads(&tree("calls.size() == 0 && usage.cost == null"));
        assert!(r.calls && r.usage && !r.answer && !r.metadata && !r.model_calls);
        let r = reads(&tree("answer == metadata.x && model_calls == []"));
        assert!(!r.calls && r.answer && r.metadata && r.model_calls && !r.usage);
    }
}
