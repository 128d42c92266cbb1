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
