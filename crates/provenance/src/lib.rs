//! Where a record came from: the GPU as `nvidia-smi` names it, and the time in UTC. The GPU
//! binaries' provenance records and mdbook-cells' freezes read both here, so that every record
//! names a GPU and a date the same way. No dependencies: no clock crate, no NVML binding.
//!
//! Each reader answers `None` where there is nothing to read (no `nvidia-smi`, no driver, no
//! GPU); what stands in for it (`"unknown"`, a config's name, an error) is the caller's choice.

use std::process::Command;

/// The first GPU's `fields` (`nvidia-smi --query-gpu=FIELD,… --format=csv,noheader`, e.g.
/// `name`, `driver_version`, `memory.total`), one trimmed value per field in order, or `None`
/// when `nvidia-smi` is missing, fails or names no GPU. A value may be empty or `[N/A]`, as
/// `nvidia-smi` prints it.
pub fn gpu_query(fields: &[&str]) -> Option<Vec<String>> {
    let stdout = smi(&[
        &format!("--query-gpu={}", fields.join(",")),
        "--format=csv,noheader",
    ])?;
    first_gpu(&stdout)
}

/// The first line of `--format=csv,noheader` output, split at commas and trimmed.
fn first_gpu(stdout: &str) -> Option<Vec<String>> {
    // One line per GPU: the first is the one the records name.
    let line = stdout.lines().next()?.trim();
    if line.is_empty() {
        return None;
    }
    Some(line.split(',').map(|v| v.trim().to_string()).collect())
}

/// The first GPU's one `field` (see [`gpu_query`]), or `None` where there is none or it is empty.
pub fn gpu_field(field: &str) -> Option<String> {
    gpu_query(&[field])?
        .into_iter()
        .next()
        .filter(|v| !v.is_empty())
}

/// The CUDA version the driver supports, from the header of plain `nvidia-smi` (`--query-gpu`
/// has no field for it), e.g. `12.8`.
pub fn cuda_version() -> Option<String> {
    cuda_in_header(&smi(&[])?)
}

/// The word after `CUDA Version:` in `nvidia-smi`'s header.
fn cuda_in_header(header: &str) -> Option<String> {
    header
        .split("CUDA Version:")
        .nth(1)?
        .split_whitespace()
        .next()
        .map(str::to_string)
}

/// `nvidia-smi ARGS`' standard output, if it ran and succeeded (a failing one prints why on
/// stdout, which is no GPU's name).
fn smi(args: &[&str]) -> Option<String> {
    let out = Command::new("nvidia-smi").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Now, UTC, `YYYY-MM-DDTHH:MM:SSZ` (for badges and provenance records; no clock crate).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    utc(secs)
}

/// `secs` after the Unix epoch, UTC, as [`utc_now`] writes it.
fn utc(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_writes_civil_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        // A leap day, and the seconds before the first of March.
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(951_868_799), "2000-02-29T23:59:59Z");
        assert_eq!(utc(1_767_225_600 - 1), "2025-12-31T23:59:59Z");
        assert_eq!(utc(-1), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn utc_now_has_the_records_shape() {
        let now = utc_now();
        assert_eq!(now.len(), "YYYY-MM-DDTHH:MM:SSZ".len(), "{now}");
        assert!(now.as_str() > "2025", "{now}");
        assert!(now.ends_with('Z') && now.as_bytes()[10] == b'T', "{now}");
    }

    #[test]
    fn a_query_reads_the_first_gpus_line() {
        let two = "NVIDIA H200, 570.133.20, 143771 MiB\nNVIDIA H200, 570.133.20, [N/A]\n";
        assert_eq!(
            first_gpu(two),
            Some(vec![
                "NVIDIA H200".into(),
                "570.133.20".into(),
                "143771 MiB".into()
            ])
        );
        // Values stay as printed, empty ones too: what stands in for them is the caller's.
        assert_eq!(
            first_gpu(" , [N/A]\n"),
            Some(vec![String::new(), "[N/A]".into()])
        );
        assert_eq!(first_gpu(""), None);
        assert_eq!(first_gpu("   \nNVIDIA H200\n"), None);
    }

    #[test]
    fn the_cuda_version_is_the_headers_word() {
        let header =
            "| NVIDIA-SMI 570.133.20   Driver Version: 570.133.20     CUDA Version: 12.8     |";
        assert_eq!(cuda_in_header(header).as_deref(), Some("12.8"));
        assert_eq!(cuda_in_header("No devices were found"), None);
        assert_eq!(cuda_in_header("CUDA Version:"), None);
    }
}
