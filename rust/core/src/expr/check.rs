//! Compile-time checks of a parsed expression (SPEC §14): every identifier is a bound
//! variable, a comprehension variable in scope or a type; every function is declared; and
//! comprehensions nest at most `MAX_COMPREHENSION_NESTING` deep.
use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::{Context, Env, ExecutionError, Value as CelValue};

use super::MAX_COMPREHENSION_NESTING;

/// The variables every evaluation binds.
const BOUND: [&str; 5] = ["calls", "answer", "metadata", "model_calls", "usage"];

/// The first problem of `e`, as a message for `expression.expr`.
pub fn check(e: &IdedExpr, env: &Env) -> Result<(), String> {
    Checker { env, scope: Vec::new() }.walk(e, 0)
}

struct Checker<'a> {
    env: &'a Env,
    /// Comprehension variables in scope, innermost last.
    scope: Vec<String>,
}

impl Checker<'_> {
    fn walk(&mut self, e: &IdedExpr, nesting: usize) -> Result<(), String> {
        match &e.expr {
            Expr::Ident(name) => self.ident(name),
            Expr::Select(s) => {
                if s.test {
                    return self.walk(&s.operand, nesting);
                }
                match segments(e) {
                    Some(names) => self.qualified(&names),
                    None => self.walk(&s.operand, nesting),
                }
            }
            Expr::Call(call) => {
                let namespaced = call.target.as_deref().and_then(segments).map(|mut s| {
                    s.push(&call.func_name);
                    s.join(".")
                });
                match (&call.target, namespaced) {
                    // `math.abs(x)`: a namespaced global function, not a method on `math`.
                    (Some(_), Some(name)) if declared(&name, call.args.len(), false) => {}
                    (Some(target), _) => {
                        self.walk(target, nesting)?;
                        function(&call.func_name, call.args.len(), true)?;
                    }
                    (None, _) => function(&call.func_name, call.args.len(), false)?,
                }
                call.args.iter().try_for_each(|a| self.walk(a, nesting))
            }
            Expr::Comprehension(c) => {
                if nesting + 1 > MAX_COMPREHENSION_NESTING {
                    return Err(format!(
                        "comprehensions (all, exists, exists_one, map, filter) nest more than \
                         {MAX_COMPREHENSION_NESTING} deep"
                    ));
                }
                self.walk(&c.iter_range, nesting)?;
                self.walk(&c.accu_init, nesting)?;
                let depth = self.scope.len();
                self.scope.push(c.iter_var.clone());
                self.scope.extend(c.iter_var2.clone());
                self.scope.push(c.accu_var.clone());
                let body = [&c.loop_cond, &c.loop_step, &c.result]
                    .into_iter()
                    .try_for_each(|part| self.walk(part, nesting + 1));
                self.scope.truncate(depth);
                body
            }
            Expr::List(l) => l.elements.iter().try_for_each(|x| self.walk(x, nesting)),
            Expr::Map(m) => m.entries.iter().try_for_each(|entry| match &entry.expr {
                EntryExpr::MapEntry(me) => {
                    self.walk(&me.key, nesting)?;
                    self.walk(&me.value, nesting)
                }
                EntryExpr::StructField(f) => self.walk(&f.value, nesting),
            }),
            Expr::Struct(st) => Err(format!("unknown message type `{}`", st.type_name)),
            Expr::Literal(_) => Ok(()),
            Expr::Unspecified => Err("invalid CEL expression".to_owned()),
        }
    }

    fn in_scope(&self, name: &str) -> bool {
        BOUND.contains(&name) || self.scope.iter().any(|v| v == name)
    }

    fn ident(&self, name: &str) -> Result<(), String> {
        if self.in_scope(name) || self.env.types().find_type(name).is_some() {
            Ok(())
        } else {
            Err(format!("unknown identifier `{name}`"))
        }
    }

    /// `a.b.c`: its root is a variable, or a prefix of it names a type.
    fn qualified(&self, names: &[&str]) -> Result<(), String> {
        if self.in_scope(names[0]) {
            return Ok(());
        }
        let found =
            (1..=names.len()).any(|n| self.env.types().find_type(&names[..n].join(".")).is_some());
        if found {
            Ok(())
        } else {
            Err(format!("unknown identifier `{}`", names[0]))
        }
    }
}

/// `Err` when `name` is a function (or method) the environment does not declare.
fn function(name: &str, arity: usize, member: bool) -> Result<(), String> {
    // Operators (`_+_`, `!_`, `@in`, ...) are spelled with symbols and always declared.
    let spelled = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    if !spelled || declared(name, arity, member) {
        Ok(())
    } else if member {
        Err(format!("unknown method `{name}`"))
    } else {
        Err(format!("unknown function `{name}`"))
    }
}

/// Whether the environment declares `name`, asked by calling it on `null`s: an undeclared
/// function is the one error that names the function itself as an undeclared reference.
fn declared(name: &str, arity: usize, member: bool) -> bool {
    let null = || IdedExpr { id: 0, expr: Expr::Literal(LiteralValue::Null) };
    let probe = IdedExpr {
        id: 0,
        expr: Expr::Call(cel::common::ast::CallExpr {
            func_name: name.to_owned(),
            target: member.then(|| Box::new(null())),
            args: (0..arity).map(|_| null()).collect(),
        }),
    };
    let ctx = Context::with_env(std::sync::Arc::clone(&super::ENV));
    !matches!(
        CelValue::resolve(&probe, &ctx),
        Err(ExecutionError::UndeclaredReference(r)) if r.as_str() == name
    )
}

/// The depth of the tree `e` (a leaf is 1).
pub fn depth(e: &IdedExpr) -> usize {
    let children: usize = match &e.expr {
        Expr::Call(call) => call
            .target
            .iter()
            .map(|t| depth(t))
            .chain(call.args.iter().map(depth))
            .max()
            .unwrap_or(0),
        Expr::Comprehension(c) => {
            [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result]
                .into_iter()
                .map(depth)
                .max()
                .unwrap_or(0)
        }
        Expr::Select(s) => depth(&s.operand),
        Expr::List(l) => l.elements.iter().map(depth).max().unwrap_or(0),
        Expr::Map(m) => m
            .entries
            .iter()
            .map(|entry| match &entry.expr {
                EntryExpr::MapEntry(me) => depth(&me.key).max(depth(&me.value)),
                EntryExpr::StructField(f) => depth(&f.value),
            })
            .max()
            .unwrap_or(0),
        Expr::Struct(st) => st
            .entries
            .iter()
            .map(|entry| match &entry.expr {
                EntryExpr::MapEntry(me) => depth(&me.key).max(depth(&me.value)),
                EntryExpr::StructField(f) => depth(&f.value),
            })
            .max()
            .unwrap_or(0),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => 0,
    };
    children + 1
}

/// The names of a qualified name `a.b.c` (root first); `None` for anything else.
fn segments(e: &IdedExpr) -> Option<Vec<&str>> {
    let mut out = Vec::new();
    let mut at = e;
    loop {
        match &at.expr {
            Expr::Ident(name) => {
                out.push(name.as_str());
                out.reverse();
                return Some(out);
            }
            Expr::Select(s) if !s.test => {
                out.push(s.field.as_str());
                at = &s.operand;
            }
            _ => return None,
        }
    }
}
