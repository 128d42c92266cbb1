//! Pages loaded in a real headless Chromium, for the tests that check what a reader sees:
//! [`chromium`] finds the browser (and insists on it on CI), [`probe`] loads a copy of a page
//! with a script added and returns what the script left in the DOM.

use std::path::Path;
use std::process::Command;

/// The Chromium binary, or `None` off CI where it is not installed.
pub fn chromium() -> Option<&'static str> {
    let found = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have chromium (see .ci/run)"
        );
        eprintln!("skipping the Chromium checks: chromium is not installed");
    }
    found
}

/// What a probe puts into a copy of a page: `head` first in its `<head>`, `script` last in its
/// `<body>`; the script leaves its answer in `body[data-ATTR]`. `tag` names the copy and the
/// Chromium profile, so that probes running at once do not share either.
pub struct Probe<'a> {
    /// HTML put first in `<head>`.
    pub head: &'a str,
    /// HTML put last in `<body>`: the script that answers.
    pub script: &'a str,
    /// The `body[data-ATTR]` attribute the answer is left in.
    pub attr: &'a str,
    /// Names the copy and the profile.
    pub tag: &'a str,
}

/// Loads `page` with `probe` in headless Chromium; returns the probe's answer, HTML entities
/// decoded. The copy of the page lies beside it; Chromium's profile goes under `scratch` (a
/// test's `CARGO_TARGET_TMPDIR`).
pub fn probe(chromium: &str, page: &Path, probe: &Probe<'_>, scratch: &Path) -> String {
    let Probe {
        head,
        script,
        attr,
        tag,
    } = probe;
    let html = std::fs::read_to_string(page).unwrap();
    let probed = html
        .replacen("<head>", &format!("<head>{head}"), 1)
        .replacen("</body>", &format!("{script}</body>"), 1);
    let copy = page.with_extension(format!("probe-{tag}.html"));
    std::fs::write(&copy, probed).unwrap();
    // A profile per page and tag: two browsers on one profile refuse each other (tests run
    // in parallel).
    let profile = {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        page.hash(&mut h);
        scratch.join(format!("chromium-{tag}-{:016x}", h.finish()))
    };
    // A browser that hangs fails the test instead of holding it forever.
    let output = Command::new("timeout")
        .arg("120")
        .arg(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1200,900",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", copy.display()))
        .output()
        .expect("run chromium");
    let _ = std::fs::remove_file(&copy);
    let _ = std::fs::remove_dir_all(&profile);
    let dom = String::from_utf8_lossy(&output.stdout);
    dom.split(&format!("data-{attr}=\""))
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| {
            panic!(
                "the probe did not run on {}: {}",
                page.display(),
                String::from_utf8_lossy(&output.stderr)
            )
        })
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}
