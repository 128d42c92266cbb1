//! Tests of network files: parsing, the checks, and their errors' lines.

use super::*;
use crate::recipe::RecipeError;

const DECODER: &str = include_str!("../../../../repro/models/decoder.toml");

#[test]
fn parameters_saturate_instead_of_overflowing() {
    let mut d = Network::parse("decoder.toml", DECODER).unwrap();
    let exact = d.arch.params();
    let Arch::Decoder(shape) = &mut d.arch else {
        panic!("a decoder")
    };
    shape.d_model = 7_429_491_000_000_000_000;
    assert_eq!(d.arch.params(), u64::MAX);
    let Arch::Decoder(shape) = &mut d.arch else {
        panic!("a decoder")
    };
    shape.d_model = 768;
    assert_eq!(d.arch.params(), exact);
}

#[test]
fn every_bundled_network_parses() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../repro/models");
    let mut families = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let n = Network::parse(&path.display().to_string(), &text).unwrap();
        assert!(n.arch.params() > 1000, "{}", n.arch.params());
        families.insert(n.arch.family());
    }
    assert!(families.len() >= 4, "{families:?}");
}

#[test]
fn heads_that_do_not_divide_the_width_are_refused_at_their_line() {
    let text = DECODER.replace("n_heads = 12", "n_heads = 7");
    let e = Network::parse("x.toml", &text).unwrap_err();
    let line = text.lines().position(|l| l.starts_with("n_heads")).unwrap() + 1;
    assert_eq!(e.line(), line, "{e}");
    assert!(e.to_string().contains("does not divide"), "{e}");
}

#[test]
fn absurd_sizes_are_refused_before_any_work() {
    let text = DECODER.replace("batch = 16", "batch = 9223372036854775807");
    let e = Network::parse("x.toml", &text).unwrap_err();
    assert!(e.to_string().contains("`decoder.batch`"), "{e}");
    let line = text.lines().position(|l| l.starts_with("batch")).unwrap() + 1;
    assert_eq!(e.line(), line);
    // Past TOML's integers: refused by the reader, at its line.
    let text = DECODER.replace("batch = 16", "batch = 18446744073709551615");
    let e = Network::parse("x.toml", &text).unwrap_err();
    assert_eq!(e.line(), line, "{e}");
    let e = Network::parse(
        "x.toml",
        &DECODER.replace("d_model = 768", "d_model = 4294967292"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("the parameters"), "{e}");
    let d = Network::parse("x.toml", DECODER).unwrap();
    assert!(d.with_batch(1 << 40).is_err());
    assert!(d.with_batch(0).is_err());
    assert_eq!(d.with_batch(3).unwrap().tokens(), 3 * 256);
}

#[test]
fn unknown_keys_zeros_and_two_families_name_their_line() {
    let e = Network::parse("x.toml", &DECODER.replace("d_ff =", "d_fff =")).unwrap_err();
    assert!(
        matches!(e, RecipeError::Syntax { .. }) && e.line() > 1,
        "{e}"
    );
    assert!(e.to_string().contains("d_fff"), "{e}");
    let text = DECODER.replace("n_layers = 6", "n_layers = 0");
    let e = Network::parse("x.toml", &text).unwrap_err();
    assert!(
        e.to_string()
            .contains("`decoder.n_layers` must be at least 1"),
        "{e}"
    );
    let line = text
        .lines()
        .position(|l| l.starts_with("n_layers"))
        .unwrap()
        + 1;
    assert_eq!(e.line(), line);
    let two =
        format!("{DECODER}\n[mlp]\ninputs = 4\nhidden = 4\nn_layers = 1\nclasses = 2\nbatch = 1\n");
    let e = Network::parse("x.toml", &two).unwrap_err();
    assert!(e.to_string().contains("decoder and mlp"), "{e}");
}

#[test]
fn a_resnet_whose_side_cannot_halve_enough_is_refused() {
    let text = "[resnet]\nimage = 24\nchannels = 3\nwidth = 8\nstages = 4\nblocks = 1\n\
                classes = 10\nbatch = 2\n[training]\nbackend = \"cube\"\n\
                checkpointing = \"none\"\nsteps = 1\nseed = 1\n";
    let e = Network::parse("r.toml", text).unwrap_err();
    assert!(e.to_string().contains("`resnet.stages`"), "{e}");
    assert_eq!(e.line(), 5);
    let ok = Network::parse("r.toml", &text.replace("image = 24", "image = 32")).unwrap();
    assert_eq!(ok.precision, Precision::F32);
}

/// Each family's bundled file (`repro/models/FAMILY.toml`): every family has one.
fn bundled() -> Vec<(&'static str, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../repro/models");
    FAMILIES
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(dir.join(format!("{f}.toml"))).unwrap();
            (*f, text)
        })
        .collect()
}

/// Whether `line` writes `name = …`.
fn writes(line: &str, name: &str) -> bool {
    line.trim_start()
        .strip_prefix(name)
        .is_some_and(|rest| rest.trim_start().starts_with('='))
}

/// `text` with `name = value` in `[table]`: its line rewritten where written, else added under
/// the table's header.
fn set(text: &str, table: &str, name: &str, value: &str) -> String {
    if text.lines().any(|l| writes(l, name)) {
        text.lines()
            .map(|l| match writes(l, name) {
                true => format!("{name} = {value}"),
                false => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        text.replace(
            &format!("[{table}]\n"),
            &format!("[{table}]\n{name} = {value}\n"),
        )
    }
}

/// The names a serde message lists after `expected`, in backquotes.
fn expected(message: &str) -> std::collections::BTreeSet<String> {
    let (_, list) = message.split_once("expected").expect(message);
    list.split('`')
        .skip(1)
        .step_by(2)
        .map(String::from)
        .collect()
}

/// The keys of a file's tables: its family's, then `[training]`'s.
fn keys_of_file(family: &str) -> impl Iterator<Item = &'static Key> {
    keys_of(family).chain(keys_of("training"))
}

#[test]
fn the_families_described_are_the_families_read() {
    assert_eq!(FAMILY_DOCS.map(|f| f.table), FAMILIES);
    for k in &KEYS {
        assert!(
            FAMILIES.contains(&k.table()) || k.table() == "training",
            "{}",
            k.field
        );
    }
    for family in FAMILIES {
        assert!(key(family, "batch").is_some(), "{family}");
    }
}

/// [`KEYS`] lists exactly the keys the parser reads: serde's own list of the keys a table
/// expects (from the error for one it does not), and `batch`, read before serde.
#[test]
fn the_keys_listed_are_the_keys_the_parser_reads() {
    for (family, text) in bundled() {
        for table in [family, "training"] {
            let e = Network::parse("x.toml", &set(&text, table, "zz_unknown", "1")).unwrap_err();
            let mut listed: std::collections::BTreeSet<String> =
                keys_of(table).map(|k| k.name().to_string()).collect();
            if table != "training" {
                assert!(listed.remove("batch"), "{table}");
            }
            assert_eq!(expected(&e.to_string()), listed, "{e}");
            assert!(e.to_string().contains(FORMAT_PAGE), "{e}");
        }
    }
}

/// A required key left out is refused with its name and the page; a key left out to its
/// default reads as the default written.
#[test]
fn required_keys_and_defaults_are_as_listed() {
    for (family, text) in bundled() {
        for k in keys_of_file(family) {
            let without = text
                .lines()
                .filter(|l| !writes(l, k.name()))
                .collect::<Vec<_>>()
                .join("\n");
            match k.written {
                Written::Required => {
                    assert_ne!(without, text, "{family}: {} is not written", k.field);
                    let e = Network::parse("x.toml", &without).unwrap_err().to_string();
                    assert!(e.contains(&format!("`{}`", k.name())), "{e}");
                    assert!(e.contains(FORMAT_PAGE), "{e}");
                }
                Written::Default(value) => {
                    let left_out = Network::parse("x.toml", &without).unwrap();
                    let written = set(&without, k.table(), k.name(), value);
                    assert_eq!(left_out, Network::parse("x.toml", &written).unwrap());
                }
            }
        }
    }
}

/// Every name listed is read, and a name not listed is refused with the list the parser
/// expects: the same names.
#[test]
fn the_names_listed_are_the_names_the_parser_reads() {
    let vit = &bundled()[3].1;
    for k in keys_of("training") {
        let Allowed::OneOf(names) = k.allowed else {
            continue;
        };
        for name in names {
            Network::parse(
                "x.toml",
                &set(vit, "training", k.name(), &format!("\"{name}\"")),
            )
            .unwrap();
        }
        let e = Network::parse("x.toml", &set(vit, "training", k.name(), "\"zz\"")).unwrap_err();
        let names: std::collections::BTreeSet<String> =
            names.iter().map(|n| n.to_string()).collect();
        assert_eq!(expected(&e.to_string()), names, "{e}");
    }
}

/// Any key given a value it may not have (a zero, a negative, a string) is refused at its line,
/// naming the key and the page.
#[test]
fn a_bad_value_names_its_key_its_line_and_the_page() {
    for (family, text) in bundled() {
        for k in keys_of_file(family) {
            let bad: &[&str] = match k.allowed {
                Allowed::Count(_) => &["0", "-3", "\"x\"", "1.5"],
                Allowed::Any => &["-1", "\"x\""],
                Allowed::OneOf(_) => &["\"zz\"", "1"],
            };
            for value in bad {
                let written = set(&text, k.table(), k.name(), value);
                let line = written.lines().position(|l| writes(l, k.name())).unwrap() + 1;
                let e = Network::parse("x.toml", &written).unwrap_err();
                let shown = e.to_string();
                assert!(shown.contains(&format!("`{}`", k.field)), "{shown}");
                assert!(shown.contains(FORMAT_PAGE), "{shown}");
                assert_eq!(e.line(), line, "{shown}");
            }
        }
    }
}
