//! Small pieces of prose and tables that several cells write the same way.

/// `a`, `a and b`, `a, b and c`: items as a sentence lists them, the last joined by `and`
/// (any word, `" or "` included).
pub fn listed<S: AsRef<str>>(items: &[S], and: &str) -> String {
    match items.split_last() {
        Some((last, rest)) if !rest.is_empty() => {
            let rest: Vec<&str> = rest.iter().map(AsRef::as_ref).collect();
            format!("{}{and}{}", rest.join(", "), last.as_ref())
        }
        Some((last, _)) => last.as_ref().to_string(),
        None => String::new(),
    }
}

/// Steps in log order, as the chapters name a log's deaths: `step 400, then step 300`.
pub fn steps(steps: &[u32]) -> String {
    let named: Vec<String> = steps.iter().map(|s| format!("step {s}")).collect();
    named.join(", then ")
}

/// Runs of consecutive values of sorted `xs`, as (first, last) pairs.
pub fn runs(xs: &[u32]) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = vec![];
    for &x in xs {
        match out.last_mut() {
            Some(r) if r.1.checked_add(1) == Some(x) => r.1 = x,
            _ => out.push((x, x)),
        }
    }
    out
}

/// Sorted `xs` as ranges: `1–3, 5, 7–9`; `none` when empty.
pub fn spans(xs: &[u32]) -> String {
    if xs.is_empty() {
        return "none".into();
    }
    let runs: Vec<String> = runs(xs).iter().map(|&r| span(r)).collect();
    runs.join(", ")
}

/// One run: `5`, or `7–9`.
pub fn span((first, last): (u32, u32)) -> String {
    if first == last {
        first.to_string()
    } else {
        format!("{first}–{last}")
    }
}

/// The distinct values of `xs`, in first-seen order.
pub fn distinct<T: PartialEq>(xs: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut out: Vec<T> = vec![];
    for x in xs {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// A count as the prose writes it: digits in groups of three, separated by spaces, from five
/// digits on (`7168`, `129 280`).
pub fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() * 2);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && s.len() > 4 && (s.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_read_as_sentences() {
        assert_eq!(listed::<&str>(&[], " and "), "");
        assert_eq!(listed(&["6"], " and "), "6");
        assert_eq!(listed(&["6", "12"], " or "), "6 or 12");
        assert_eq!(listed(&["6", "12", "18"], " and "), "6, 12 and 18");
    }

    #[test]
    fn deaths_read_in_log_order() {
        assert_eq!(steps(&[400, 300]), "step 400, then step 300");
        assert_eq!(steps(&[200]), "step 200");
        assert_eq!(steps(&[]), "");
    }

    #[test]
    fn consecutive_values_make_ranges() {
        assert_eq!(runs(&[1, 2, 3, 5, 7, 8]), [(1, 3), (5, 5), (7, 8)]);
        assert_eq!(spans(&[1, 2, 3, 5, 7, 8]), "1–3, 5, 7–8");
        assert_eq!(spans(&[]), "none");
        assert_eq!(runs(&[u32::MAX - 1, u32::MAX]), [(u32::MAX - 1, u32::MAX)]);
    }

    #[test]
    fn distinct_keeps_first_seen_order() {
        assert_eq!(distinct([3, 1, 3, 2, 1]), [3, 1, 2]);
    }

    #[test]
    fn counts_group_from_five_digits() {
        assert_eq!(grouped(7168), "7168");
        assert_eq!(grouped(129_280), "129 280");
        assert_eq!(grouped(1_000_000), "1 000 000");
        assert_eq!(grouped(0), "0");
    }
}
