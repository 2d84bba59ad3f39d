//! A record (a call, a model call, `usage`) as a CEL map whose entries are read on demand.
//!
//! The `cel` crate evaluates trait-object values, so a record need not be built as its own
//! `HashMap` of boxed values on every evaluation: [`Record`] answers `r.f`, `r['f']`,
//! `has(r.f)`, `'f' in r` and `size(r)` from its [`Entries`], and a comprehension copies the
//! record's handle, not its entries. Everything else (equality, iterating its keys, a
//! non-string key) goes to the record built as the crate's own map, once per evaluation
//! ([`Entries::map`]), so it behaves exactly as that map does.
//!
//! The crate also recognises its own maps by a downcast (its `as_builtin`, hidden from its
//! docs but public), which it makes on every field selection, to unwrap optionals, as well as
//! to convert a value or to compare a map with one. A record answers it as the built map when
//! [`Record::as_map`] is set, which [`super::reads`] decides per expression: when nothing
//! needs it, a record answers "not a built-in" and no map is built for a field selection.
use std::fmt;

use cel::common::traits::{Container, Indexer, Iterable, Sizer, Zeroer};
use cel::common::types::{CelInt, CelMap, CelString, Type, MAP_TYPE};
use cel::common::value::{Builtin, BuiltinRef, CowVal, Val};
use cel::ExecutionError;

/// The entries of one record, held for one evaluation.
pub trait Entries<'v>: Send + Sync {
    /// How many keys it has.
    fn len(&self) -> usize;
    /// The value at string key `key`, if it has that key.
    fn entry(&self, key: &str) -> Option<&(dyn Val + 'v)>;
    /// The record as the crate's own map: the same keys and values, built on first use.
    fn map(&self) -> &CelMap<'v>;
}

/// A handle to a record's entries: cheap to copy (a comprehension binds a copy per element).
#[derive(Clone, Copy)]
pub struct Record<'s, 'v> {
    pub entries: &'s dyn Entries<'v>,
    /// Whether to answer the crate's downcast as the built map (see the module docs).
    pub as_map: bool,
}

impl fmt::Debug for Record<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.entries.map(), f)
    }
}

impl Val for Record<'_, '_> {
    fn get_type(&self) -> &Type {
        <Self as Val>::cel_type()
    }

    fn cel_type() -> &'static Type {
        &MAP_TYPE
    }

    fn as_container(&self) -> Option<&dyn Container> {
        Some(self)
    }

    fn as_indexer<'b, 'w>(&'b self) -> Option<&'b (dyn Indexer + 'w)>
    where
        Self: 'w,
    {
        Some(self)
    }

    fn into_indexer<'w>(self: Box<Self>) -> Option<Box<dyn Indexer + 'w>>
    where
        Self: 'w,
    {
        Some(self)
    }

    fn as_iterable<'b, 'w>(&'b self) -> Option<&'b (dyn Iterable + 'w)>
    where
        Self: 'w,
    {
        // In the built map's key order, as the crate's map iterates.
        Some(self.entries.map())
    }

    fn as_sizer(&self) -> Option<&dyn Sizer> {
        Some(self)
    }

    fn as_zeroer(&self) -> Option<&dyn Zeroer> {
        Some(self)
    }

    fn equals(&self, other: &dyn Val) -> bool {
        self.entries.map().equals(other)
    }

    fn clone_as_boxed<'w>(&self) -> Box<dyn Val + 'w>
    where
        Self: 'w,
    {
        Box::new(*self)
    }

    fn as_builtin<'b, 'w>(&'b self) -> BuiltinRef<'b, 'w>
    where
        Self: 'w,
    {
        if self.as_map {
            BuiltinRef::Map(self.entries.map())
        } else {
            BuiltinRef::Other
        }
    }

    fn into_builtin<'w>(self: Box<Self>) -> Option<Builtin<'w>>
    where
        Self: 'w,
    {
        self.as_map.then(|| Builtin::Map(self.entries.map().clone()))
    }
}

impl Indexer for Record<'_, '_> {
    fn get<'b, 'w>(&'b self, key: &dyn Val) -> Result<CowVal<'b, 'w>, ExecutionError>
    where
        Self: 'w,
    {
        let entries = self.entries;
        match key.downcast_ref::<CelString>() {
            Some(k) => entries
                .entry(k.inner())
                .map(CowVal::Borrowed)
                // The built map's error for a missing string key.
                .ok_or_else(|| ExecutionError::no_such_key(k.inner())),
            None => entries.map().get(key),
        }
    }

    fn steal<'w>(self: Box<Self>, key: &dyn Val) -> Result<Box<dyn Val + 'w>, ExecutionError>
    where
        Self: 'w,
    {
        self.get(key).map(CowVal::into_owned)
    }
}

impl Container for Record<'_, '_> {
    fn contains(&self, key: &dyn Val) -> Result<bool, ExecutionError> {
        match key.downcast_ref::<CelString>() {
            Some(k) => Ok(self.entries.entry(k.inner()).is_some()),
            None => self.entries.map().contains(key),
        }
    }
}

impl Sizer for Record<'_, '_> {
    fn size(&self) -> CelInt {
        CelInt::from(i64::try_from(self.entries.len()).unwrap_or(i64::MAX))
    }
}

impl Zeroer for Record<'_, '_> {
    fn is_zero_value(&self) -> bool {
        self.entries.len() == 0
    }
}
