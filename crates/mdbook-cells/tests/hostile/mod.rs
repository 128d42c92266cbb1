//! Cells that crash, hang, print without end or delete the engine's folders harm only themselves.

use super::*;

/// Cells that misbehave on purpose: each harms only itself, is named for it, and leaves
/// nothing behind.
#[test]
fn hostile_cells_harm_only_themselves() {
    let chapter = r#"# Hostile

```cell
// A background process the cell leaves running.
std::process::Command::new("sleep").arg("300").spawn()?.id().to_string()
```

```cell
panic!("first\n\nsecond")
```

```cell
std::process::abort()
```

```cell
loop {
    println!("{}", "x".repeat(1000));
}
```

```cell
//| id: fig-big
//| caption: Too big
Html("<p class=\"x\">big</p>".repeat(10_000))
```

```cell
// Deletes the folder the engine collects the cells' outputs in (its stdout's folder).
let out = std::fs::read_link("/proc/self/fd/1")?;
std::fs::remove_dir_all(out.parent().unwrap())?;
```

```cell
"still fine"
```

```cell
// Deletes the whole cache: the cell crate, its build, the stored outputs.
let out = std::fs::read_link("/proc/self/fd/1")?;
std::fs::remove_dir_all(out.parent().unwrap().parent().unwrap())?;
```

```cell
"fine too"
```
"#;
    let started = std::time::Instant::now();
    let (page, report) = run_text("hostile", chapter, |c| c.output_limit = 64 * 1024);
    let problems: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    let expected = [
        "src/inline.md:9: cell failed: panicked: first",
        "src/inline.md:12: cell failed: the cell process died: the cell process was killed by signal 6",
        "src/inline.md:16: cell failed: panicked: failed printing to stdout: File too large (os error 27)",
        "src/inline.md:22: cell failed: output over the limit: the cell's html output is over the book's output-limit of 65536 bytes; make it smaller, or raise `output-limit` under [preprocessor.cells]",
        "src/inline.md:28: cell failed: returned an error: the cell deleted",
        "src/inline.md:38: cell failed: returned an error: the cell deleted",
    ];
    assert_eq!(problems.len(), 6, "{problems:#?}");
    for (problem, expected) in problems.iter().zip(expected) {
        assert!(
            problem.starts_with(expected),
            "{problem}\ninstead of\n{expected}"
        );
    }
    // A crash is seen at once, not at a timeout held open by the background process.
    assert!(started.elapsed().as_secs() < 20, "{:?}", started.elapsed());
    assert!(
        page.contains(">still fine<") && page.contains(">fine too<"),
        "{page}"
    );
    assert!(page.contains("writes past it fail, so a runaway print cannot fill the disk"));

    // The background process died with the cells' process group.
    let pid = page
        .split("<pre class=\"cell-output\">")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .expect("the first cell's pid");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.split(' ').nth(2) == Some("Z"),
        "pid {pid} still runs: {stat}"
    );

    // No blank line inside any cell's HTML: every later cell stays outside the `<pre>`.
    for cell in page.split("<div class=\"cell\"").skip(1) {
        let html = &cell[cell.find("\n\n<").map_or(0, |i| i + 2)..];
        let html = &html[..html.find("\n</div>").unwrap_or(html.len())];
        let output = &html[html.find("```\n\n").map_or(0, |i| i + 5)..];
        assert!(!output.contains("\n\n"), "a blank line in {output:?}");
    }
    // Disk use stays bounded by the limit: nothing over it is left in the results folder.
    let results = cache_dir("hostile").join("results");
    for entry in std::fs::read_dir(&results).unwrap() {
        let len = entry.unwrap().metadata().unwrap().len();
        assert!(len <= 64 * 1024 + 4096, "{len} bytes left in {results:?}");
    }
}
