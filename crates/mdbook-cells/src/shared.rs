//! A chapter's shared code (its parameters and prelude) as items, read with syn: which items a
//! cell uses ([`used_prelude`], what a GPU cell's freeze keys on besides its own [`tokens`]),
//! which no cell uses ([`unused_items`], a strict build's problem), and where each starts
//! ([`item_starts`]: each cell's module holds the whole prelude, so its items may go unused
//! there). Tokens, not text: reformatting a cell or editing a prelude item it does not use
//! leaves a freeze current — only a GPU can remake one, and a key that changed for nothing
//! locks ordinary code until one does.

use std::collections::HashSet;

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use quote::ToTokens;

/// `code` as its tokens: comments (doc comments too) and layout dropped, a trailing comma in a
/// list (which rustfmt adds or removes with the layout) too, and its `use` declarations as one
/// sorted list of paths (rustfmt sorts and regroups them). `None` when `code` does not lex.
pub(crate) fn tokens(code: &str) -> Option<String> {
    let stream: TokenStream = code.parse().ok()?;
    let Ok(block) = syn::parse_str::<syn::Block>(&format!("{{{code}}}")) else {
        return Some(normalized(stream).to_string());
    };
    let mut uses = Vec::new();
    let mut rest = Vec::new();
    for stmt in &block.stmts {
        match stmt {
            syn::Stmt::Item(syn::Item::Use(u)) => uses.extend(use_paths(u)),
            other => rest.push(normalized(other.to_token_stream()).to_string()),
        }
    }
    uses.sort();
    Some(format!("{}\n{}", uses.join("\n"), rest.join("\n")))
}

/// A `use` declaration as the paths it imports, one each (`a::{B, C as D}` is `a::B` and
/// `a::C as D`), with its attributes and visibility.
fn use_paths(item: &syn::ItemUse) -> Vec<String> {
    fn walk(prefix: String, tree: &syn::UseTree, out: &mut Vec<String>) {
        match tree {
            syn::UseTree::Path(p) => walk(format!("{prefix}{}::", p.ident), &p.tree, out),
            syn::UseTree::Name(n) => out.push(format!("{prefix}{}", n.ident)),
            syn::UseTree::Rename(r) => out.push(format!("{prefix}{} as {}", r.ident, r.rename)),
            syn::UseTree::Glob(_) => out.push(format!("{prefix}*")),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| walk(prefix.clone(), t, out)),
        }
    }
    let attrs: TokenStream = item.attrs.iter().map(ToTokens::to_token_stream).collect();
    let (attrs, vis) = (
        normalized(attrs).to_string(),
        item.vis.to_token_stream().to_string(),
    );
    let colon = if item.leading_colon.is_some() {
        "::"
    } else {
        ""
    };
    let head = [attrs.as_str(), vis.as_str(), "use"]
        .into_iter()
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
        + " "
        + colon;
    let mut out = Vec::new();
    walk(head, &item.tree, &mut out);
    out
}

fn normalized(stream: TokenStream) -> TokenStream {
    let mut trees: Vec<TokenTree> = Vec::new();
    for tree in stream {
        // A doc comment is `#[doc = "…"]` (or `#![doc …]`) by now: drop it.
        if let TokenTree::Group(g) = &tree
            && g.delimiter() == Delimiter::Bracket
            && g.stream()
                .into_iter()
                .next()
                .is_some_and(|t| t.to_string() == "doc")
        {
            let hash = |t: &TokenTree| matches!(t, TokenTree::Punct(p) if p.as_char() == '#');
            let bang = |t: &TokenTree| matches!(t, TokenTree::Punct(p) if p.as_char() == '!');
            if trees.last().is_some_and(bang) && trees.len() >= 2 && hash(&trees[trees.len() - 2]) {
                trees.truncate(trees.len() - 2);
                continue;
            }
            if trees.last().is_some_and(hash) {
                trees.pop();
                continue;
            }
        }
        trees.push(tree);
    }
    let mut trees: Vec<TokenTree> = trees
        .into_iter()
        .map(|tree| match tree {
            TokenTree::Group(g) => {
                let mut inner = proc_macro2::Group::new(g.delimiter(), normalized(g.stream()));
                inner.set_span(g.span());
                TokenTree::Group(inner)
            }
            other => other,
        })
        .collect();
    let comma = |t: &TokenTree| matches!(t, TokenTree::Punct(p) if p.as_char() == ',');
    // `(x,)` is a one-tuple and `(x)` is not: a comma goes only when another one separates items.
    if trees.last().is_some_and(comma) && trees[..trees.len() - 1].iter().any(comma) {
        trees.pop();
    }
    trees.into_iter().collect()
}

/// The items of `prelude` that `code` uses, directly or through other items, each as its
/// tokens, sorted (the order of items does not change what they mean, and rustfmt reorders
/// `use`s). A prelude that does not parse counts whole (it fails to compile anyway).
pub(crate) fn used_prelude(prelude: &str, code: &str) -> Vec<String> {
    let Ok(file) = syn::parse_file(prelude) else {
        return vec![tokens(prelude).unwrap_or_else(|| prelude.to_string())];
    };
    let items: Vec<Item> = file.items.iter().flat_map(Item::of).collect();
    let taken = taken_by(&items, code);
    let mut used: Vec<String> = (items.into_iter().zip(taken))
        .filter(|(_, taken)| *taken)
        .map(|(item, _)| item.tokens)
        .collect();
    used.sort();
    used
}

/// The items of `prelude` that none of `cells` uses: each as its first line in `prelude`
/// (1-based) and its tokens. None when the prelude does not parse (its compiler error says
/// more).
pub(crate) fn unused_items(prelude: &str, cells: &[&str]) -> Vec<(usize, String)> {
    let Ok(file) = syn::parse_file(prelude) else {
        return Vec::new();
    };
    let items: Vec<Item> = file.items.iter().flat_map(Item::of).collect();
    let mut used = vec![false; items.len()];
    for code in cells {
        for (used, taken) in used.iter_mut().zip(taken_by(&items, code)) {
            *used |= taken;
        }
    }
    (items.into_iter().zip(used))
        .filter(|(item, used)| !used && !item.always && !item.import)
        .map(|(item, _)| (item.line, item.tokens))
        .collect()
}

/// Where each top-level item of `code` that can carry an `#[allow]` starts, its attributes and
/// doc comments included: line (1-based) and column (in characters). A macro call
/// (`thread_local! { … }`) is left out: rustc ignores an attribute on it, with a warning of its
/// own. Empty when `code` does not parse.
pub(crate) fn item_starts(code: &str) -> Vec<(usize, usize)> {
    let Ok(file) = syn::parse_file(code) else {
        return Vec::new();
    };
    (file.items.iter())
        .filter(|item| !matches!(item, syn::Item::Macro(m) if m.ident.is_none()))
        .filter_map(|item| item.to_token_stream().into_iter().next())
        .map(|first| (first.span().start().line, first.span().start().column))
        .collect()
}

/// Which of `items` `code` uses, directly or through other items.
fn taken_by(items: &[Item], code: &str) -> Vec<bool> {
    let block = syn::parse_str::<syn::Block>(&format!("{{{code}}}"));
    let mut used = match &block {
        // A cell's own `use` names a path, not the prelude's items: only where it starts counts.
        Ok(block) => (block.stmts.iter())
            .flat_map(|stmt| match stmt {
                syn::Stmt::Item(syn::Item::Use(u)) => use_root(&u.tree).into_iter().collect(),
                other => idents(&other.to_token_stream()),
            })
            .collect(),
        Err(_) => idents(&code.parse().unwrap_or_default()),
    };
    // What the cell declares itself (its own `use`s, types, functions) shadows the prelude's.
    for stmt in block.iter().flat_map(|b| &b.stmts) {
        if let syn::Stmt::Item(item) = stmt {
            for name in names(item).0 {
                used.remove(&name);
            }
        }
    }
    let mut taken = vec![false; items.len()];
    // A fixed point: an item taken brings in the names it uses.
    loop {
        let before = taken.iter().filter(|t| **t).count();
        for (item, taken) in items.iter().zip(&mut taken) {
            if !*taken && item.is_used_by(&used) {
                *taken = true;
                used.extend(item.uses.iter().cloned());
            }
        }
        if taken.iter().filter(|t| **t).count() == before {
            break;
        }
    }
    taken
}

/// One prelude item as the analysis sees it.
struct Item {
    /// The names it brings into scope; for an `impl`, its type's and trait's names and its
    /// methods' (a cell calls a method without naming its type).
    names: HashSet<String>,
    /// Always taken: a glob import or an item whose names cannot be known.
    always: bool,
    /// A `use`: whether one is needed cannot be read from the text (a trait is used through
    /// its methods), so none is reported unused.
    import: bool,
    /// Every identifier in it.
    uses: HashSet<String>,
    tokens: String,
    /// Its first line in the prelude (1-based).
    line: usize,
}

impl Item {
    /// The item as the key sees it; a `use` as one item per path it imports, so that a cell
    /// using one name of a group does not key on the others.
    fn of(item: &syn::Item) -> Vec<Item> {
        let stream = item.to_token_stream();
        let line = (stream.clone().into_iter().next()).map_or(0, |t| t.span().start().line);
        let syn::Item::Use(u) = item else {
            let (names, always) = names(item);
            let tokens = normalized(stream.clone()).to_string();
            let uses = idents(&stream);
            return vec![Item {
                import: false,
                names,
                always,
                uses,
                tokens,
                line,
            }];
        };
        // Where the paths start: a prelude `mod` they reach into, say.
        let root: HashSet<String> = use_root(&u.tree).into_iter().collect();
        (use_paths(u).into_iter())
            .map(|path| {
                // `a::b::{self}` brings in `b`.
                let segments: Vec<&str> =
                    path.split([' ', ':']).filter(|s| !s.is_empty()).collect();
                let leaf = match segments.as_slice() {
                    [.., parent, "self"] => parent.to_string(),
                    [.., leaf] => leaf.to_string(),
                    [] => String::new(),
                };
                Item {
                    import: true,
                    always: leaf == "*",
                    uses: root.clone(),
                    names: HashSet::from([leaf]),
                    tokens: path,
                    line,
                }
            })
            .collect()
    }

    fn is_used_by(&self, used: &HashSet<String>) -> bool {
        self.always || self.names.iter().any(|n| used.contains(n))
    }
}

fn names(item: &syn::Item) -> (HashSet<String>, bool) {
    let one = |ident: &syn::Ident| (HashSet::from([ident.to_string()]), false);
    match item {
        syn::Item::Const(i) => one(&i.ident),
        syn::Item::Enum(i) => one(&i.ident),
        syn::Item::ExternCrate(i) => one(i.rename.as_ref().map_or(&i.ident, |(_, r)| r)),
        syn::Item::Fn(i) => one(&i.sig.ident),
        syn::Item::Macro(i) => match &i.ident {
            Some(ident) => one(ident),
            None => (HashSet::new(), true),
        },
        syn::Item::Mod(i) => one(&i.ident),
        syn::Item::Static(i) => one(&i.ident),
        syn::Item::Struct(i) => one(&i.ident),
        syn::Item::Trait(i) => {
            let mut names = HashSet::from([i.ident.to_string()]);
            names.extend(i.items.iter().filter_map(|m| match m {
                syn::TraitItem::Fn(f) => Some(f.sig.ident.to_string()),
                syn::TraitItem::Const(c) => Some(c.ident.to_string()),
                _ => None,
            }));
            (names, false)
        }
        syn::Item::TraitAlias(i) => one(&i.ident),
        syn::Item::Type(i) => one(&i.ident),
        syn::Item::Union(i) => one(&i.ident),
        syn::Item::Impl(i) => {
            let mut names = idents(&i.self_ty.to_token_stream());
            if let Some((_, path, _)) = &i.trait_ {
                names.extend(idents(&path.to_token_stream()));
            }
            names.extend(i.items.iter().filter_map(|m| match m {
                syn::ImplItem::Fn(f) => Some(f.sig.ident.to_string()),
                syn::ImplItem::Const(c) => Some(c.ident.to_string()),
                _ => None,
            }));
            (names, false)
        }
        syn::Item::Use(i) => {
            let mut names = HashSet::new();
            let glob = use_names(&i.tree, "", &mut names);
            (names, glob)
        }
        _ => (HashSet::new(), true),
    }
}

/// The first segment of a `use` path (`a` of `a::b::{c, d}`), unless it is a group at the top.
fn use_root(tree: &syn::UseTree) -> Option<String> {
    match tree {
        syn::UseTree::Path(p) => Some(p.ident.to_string()),
        syn::UseTree::Name(n) => Some(n.ident.to_string()),
        syn::UseTree::Rename(r) => Some(r.ident.to_string()),
        syn::UseTree::Glob(_) | syn::UseTree::Group(_) => None,
    }
}

/// The names a `use` tree brings in (`parent`: the path segment above it, which
/// `{self}` names); whether it holds a glob.
fn use_names(tree: &syn::UseTree, parent: &str, names: &mut HashSet<String>) -> bool {
    match tree {
        syn::UseTree::Path(p) => use_names(&p.tree, &p.ident.to_string(), names),
        syn::UseTree::Name(n) if n.ident == "self" => {
            names.insert(parent.to_string());
            false
        }
        syn::UseTree::Name(n) => {
            names.insert(n.ident.to_string());
            false
        }
        syn::UseTree::Rename(r) => {
            names.insert(r.rename.to_string());
            false
        }
        syn::UseTree::Glob(_) => true,
        syn::UseTree::Group(g) => {
            // Every branch names its imports, a glob or not.
            let mut glob = false;
            for tree in &g.items {
                glob |= use_names(tree, parent, names);
            }
            glob
        }
    }
}

fn idents(stream: &TokenStream) -> HashSet<String> {
    let mut out = HashSet::new();
    let mut stack = vec![stream.clone()];
    while let Some(stream) = stack.pop() {
        for tree in stream {
            match tree {
                TokenTree::Ident(i) => {
                    out.insert(i.to_string());
                }
                TokenTree::Group(g) => stack.push(g.stream()),
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRELUDE: &str = r#"
use std::collections::BTreeMap;
use highwater::{Recipe, RunReport};

/// Loads a record.
fn load(path: &str, steps: u32) -> RunReport {
    todo!()
}

struct Quiet;
impl Observer for Quiet {}

const STEPS: u32 = 50;
"#;

    #[test]
    fn a_cell_keys_on_the_items_it_uses_and_what_they_use() {
        let used = used_prelude(PRELUDE, "let r = load(\"x\", 1);\nr");
        assert_eq!(
            used.len(),
            2,
            "the function and the one import it uses: {used:?}"
        );
        assert!(used[0].starts_with("fn load"), "{used:?}");
        assert_eq!(used[1], "use highwater::RunReport", "{used:?}");
        let used = used_prelude(PRELUDE, "let q = Quiet; STEPS");
        assert_eq!(used.len(), 3, "struct, its impl, the const: {used:?}");
        let own = "use other::RunReport;\nstruct Quiet;\nlet r: RunReport = todo!(); Quiet";
        assert!(
            used_prelude(PRELUDE, own).is_empty(),
            "the cell's own items shadow the prelude's"
        );
        assert!(used_prelude(PRELUDE, "1 + 1").is_empty());
    }

    #[test]
    fn layout_comments_and_trailing_commas_do_not_change_the_key() {
        let a = "let plan = Plan { steps: 50, seed: 1, cap: None };\nplan";
        let b = "// The plan.\nlet plan = Plan {\n    steps: 50,\n    seed: 1,\n    cap: None,\n};\nplan";
        assert_eq!(tokens(a), tokens(b));
        assert_ne!(
            tokens("(x,)"),
            tokens("(x)"),
            "a one-tuple is not a parenthesis"
        );
        assert_ne!(tokens(a), tokens(&a.replace("50", "51")));
        assert_eq!(tokens("let s = \"unclosed;"), None);
        let reformatted = PRELUDE
            .replace(
                "fn load(path: &str, steps: u32)",
                "fn load(\n    path: &str,\n    steps: u32,\n)",
            )
            .replace(
                "/// Loads a record.",
                "/// Loads a record, as the GPU wrote it.",
            );
        assert_ne!(reformatted, PRELUDE);
        let call = "load(\"x\", 1)";
        assert_eq!(
            used_prelude(PRELUDE, call),
            used_prelude(&reformatted, call)
        );
        assert!(
            !used_prelude(PRELUDE, call)[0].contains("doc"),
            "doc comments dropped"
        );
    }

    #[test]
    fn a_prelude_that_does_not_parse_counts_whole() {
        assert_eq!(used_prelude("fn f( {", "1"), ["fn f( {"]);
        assert_eq!(used_prelude("fn f(", "1"), ["fn f("], "does not even lex");
        assert_eq!(used_prelude("fn f() }", "1"), ["fn f() }"]);
        let lexes = "fn () {}";
        assert_eq!(
            used_prelude(lexes, "1"),
            [tokens(lexes).unwrap()],
            "lexes, does not parse"
        );
        assert!(used_prelude("use a::*;\nfn g() {}", "1")[0].starts_with("use a"));
    }

    #[test]
    fn imports_count_as_the_paths_they_bring_in() {
        let grouped = "use highwater::{RunReport, Recipe};\nuse std::fs;\nlet r: Recipe = todo!(); fs::read(\"x\")";
        let split = "use std::fs;\nuse highwater::Recipe;\nuse highwater::RunReport;\nlet r: Recipe = todo!(); fs::read(\"x\")";
        assert_eq!(tokens(grouped), tokens(split));
        assert_ne!(
            tokens(grouped),
            tokens(&grouped.replace("Recipe}", "Recipe as R}"))
        );
        let prelude = "use a::{C, B};\npub use ::d::E;\nfn f() -> B { todo!() }";
        let reordered = "use a::B;\nuse a::C;\npub use ::d::E;\nfn f() -> B { todo!() }";
        assert_eq!(used_prelude(prelude, "f()"), used_prelude(reordered, "f()"));
        assert_eq!(used_prelude(prelude, "E")[0], "pub use ::d::E");
    }

    #[test]
    fn items_no_cell_uses_are_named_with_their_lines() {
        let unused = unused_items(PRELUDE, &["load(\"x\", 1)", "let q = Quiet;"]);
        // `STEPS`, line 13; never an import (`BTreeMap`, `Recipe` are not used either, but a
        // trait is used through its methods: the text cannot tell).
        assert_eq!(unused, [(13, "const STEPS : u32 = 50 ;".to_string())]);
        assert!(unused_items("fn broken(", &["1"]).is_empty());
        let module = "use highwater_book::part1::{self, wall::{self}};\nfn f() {}";
        assert_eq!(
            used_prelude(module, "wall::runs()"),
            ["use highwater_book::part1::wall::self"]
        );
        assert_eq!(used_prelude(module, "part1::x()").len(), 1);
        // A `use` with a visibility or an attribute still reaches into the prelude's `mod`.
        for import in ["pub(crate) use m::x;", "#[cfg(all())] use m::x;"] {
            let prelude = format!("mod m {{ pub fn x() {{}} }}\n{import}");
            assert_eq!(used_prelude(&prelude, "x()").len(), 2, "{import}");
            assert!(unused_items(&prelude, &["x()"]).is_empty(), "{import}");
        }
        let own = "use highwater_book::part1::wall::{self};\nwall::runs()";
        assert!(
            used_prelude(module, own).is_empty(),
            "the cell's own `{{self}}` import shadows"
        );
    }

    #[test]
    fn items_start_at_their_attributes() {
        assert_eq!(
            item_starts(PRELUDE),
            [(2, 0), (3, 0), (5, 0), (10, 0), (11, 0), (13, 0)]
        );
        assert_eq!(
            item_starts("const A: u8 = 1; const B: u8 = 2;"),
            [(1, 0), (1, 17)]
        );
        assert!(item_starts("fn (").is_empty());
        // A macro call takes no attribute; a `macro_rules!` definition does.
        let macros = "thread_local! { static N: u8 = 0; }\nmacro_rules! m { () => {} }\n";
        assert_eq!(item_starts(macros), [(2, 0)]);
    }
}
