//! The commands an HTCondor vanilla-universe user writes in every submit
//! file, each given its meaning here, so that files in the style of the
//! HTCondor manual's examples are accepted as they are.
//!
//! - `universe = vanilla` (the only one: the master is a plain process);
//! - `request_cpus`, `request_memory` (MiB unless a `K`/`M`/`G`/`T` unit is
//!   given), `request_disk` (KiB unless a unit is given): added to every
//!   class's requirements (`Cpus >= N`, `Memory >= M`, `Disk >= D`) and to
//!   the job ad (`RequestCpus`, ...);
//! - `+Name = value` and `MY.Name = value`: custom job attributes (ClassAd
//!   expressions), visible to machines' `Requirements` and `Rank` as
//!   `TARGET.Name`; `JobBatchName = text` becomes the string attribute
//!   `JobBatchName`;
//! - `initialdir`: the directory the other paths are relative to;
//! - `log`: the job's event log (kept in the spec; see [`JobSpec::log`]);
//! - `should_transfer_files` (`YES`, `NO`, `IF_NEEDED`) and
//!   `when_to_transfer_output` (`ON_EXIT`, `ON_EXIT_OR_EVICT`): accepted and
//!   checked; input files always travel to the master's machine;
//!   `transfer_output_files`: sent back to `initialdir` when the master exits;
//! - `checkpoint_exit_code`, `transfer_checkpoint_files`: a master that
//!   exits with that code has written a checkpoint; those files (plain
//!   names in its sandbox; else its `transfer_output_files`) are kept by the
//!   pool and put back in the sandbox of its next start.
//! - `when_to_transfer_output = ON_EXIT_OR_EVICT`: a master vacated by its
//!   owner sends its output files back too, and its next start gets them.
//! - `max_start_failures`: how many times the master may fail to start for
//!   a reason of the job itself (its executable does not run) before the
//!   job is held (default 3); failures of a machine never count.
//! - `master_requirements`: a ClassAd expression a machine must satisfy for
//!   the global RM to place the master there when it is submitted from a
//!   machine outside the pool (default: any machine).

use crate::bounds as limits;

/// What these commands set, gathered over the file.
#[derive(Debug, Default)]
pub struct Extras {
    /// `request_cpus`, `request_memory` (MiB), `request_disk` (KiB).
    pub cpus: Option<u64>,
    /// Memory in MiB.
    pub memory_mib: Option<u64>,
    /// Disk in KiB.
    pub disk_kib: Option<u64>,
    /// `request_gpus`.
    pub gpus: Option<u64>,
    /// Job attributes in file order: `(name, expression text)`.
    pub attributes: Vec<(String, String)>,
    /// `initialdir`.
    pub initial_dir: Option<String>,
    /// `log`.
    pub log: Option<String>,
    /// `transfer_output_files`.
    pub transfer_output_files: Vec<String>,
    /// `master_requirements`.
    pub master_requirements: Option<String>,
    /// `max_start_failures`.
    pub max_start_failures: Option<u32>,
    /// `checkpoint_exit_code`.
    pub checkpoint_exit_code: Option<i32>,
    /// `transfer_checkpoint_files`.
    pub transfer_checkpoint_files: Vec<String>,
    /// `when_to_transfer_output = ON_EXIT_OR_EVICT`.
    pub output_on_evict: bool,
}

/// A comma-separated list of files of the sandbox, each a plain file name
/// (a checkpoint comes back into the sandbox by name, never above it).
fn plain_names(key: &str, value: &str) -> Result<Vec<String>, String> {
    let names: Vec<String> = value
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    for n in &names {
        limits::check_len(key, n, limits::MAX_PATH_BYTES).map_err(|e| e.to_string())?;
        if n.contains('/') || n == "." || n == ".." {
            return Err(format!(
                "{key}: `{n}` is not a plain file name of the job's sandbox (directories are not carried here)"
            ));
        }
    }
    Ok(names)
}

/// `transfer_output_files`' value: comma-separated paths, each within the path limit.
fn output_files(value: &str) -> Result<Vec<String>, String> {
    let files: Vec<String> = value
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    for f in &files {
        limits::check_len("transfer_output_files", f, limits::MAX_PATH_BYTES)
            .map_err(|e| e.to_string())?;
    }
    Ok(files)
}

/// The value of `key`: a whole number within `range`, else an error saying
/// what was wanted (`want`).
fn number_in<T: std::str::FromStr + PartialOrd>(
    key: &str,
    value: &str,
    range: std::ops::RangeInclusive<T>,
    want: &str,
) -> Result<T, String> {
    let n = value.trim().parse::<T>().ok().filter(|n| range.contains(n));
    n.ok_or_else(|| format!("{key} = {}: {want}", value.trim()))
}

/// `master_requirements`' value: a ClassAd expression within the expression limit.
fn master_requirements(value: &str) -> Result<String, String> {
    limits::check_len("master_requirements", value, limits::MAX_EXPRESSION_BYTES)
        .map_err(|e| e.to_string())?;
    classad::parse_expr(value).map_err(|e| {
        format!(
            "master_requirements: not a ClassAd expression (column {}: {})",
            e.column, e.message
        )
    })?;
    Ok(value.trim().to_string())
}

impl Extras {
    /// Takes one `key = value` line of these commands.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let key = key.trim();
        let lc = key.to_ascii_lowercase();
        if let Some(name) = key
            .strip_prefix('+')
            .or_else(|| lc.starts_with("my.").then(|| &key[3..]))
        {
            return self.attribute(name, value);
        }
        match lc.as_str() {
            "universe" => match value.to_ascii_lowercase().as_str() {
                "vanilla" => Ok(()),
                other => Err(format!(
                    "universe = {other}: only the vanilla universe runs here (the master is started as a plain process)"
                )),
            },
            "request_cpus" => {
                self.cpus = Some(quantity("request_cpus", value, 1)?);
                Ok(())
            }
            "request_memory" => {
                self.memory_mib = Some(quantity("request_memory", value, 1 << 20)?);
                Ok(())
            }
            "request_disk" => {
                self.disk_kib = Some(quantity("request_disk", value, 1 << 10)?);
                Ok(())
            }
            "request_gpus" => {
                self.gpus = Some(quantity("request_gpus", value, 1)?);
                Ok(())
            }
            "notification" => {
                let code = notification(value)?;
                self.set_attr("JobNotification", code);
                Ok(())
            }
            "concurrency_limits" => {
                let v = concurrency_limits(value)?;
                self.set_attr("ConcurrencyLimits", v);
                Ok(())
            }
            "jobbatchname" => {
                let text = value.trim_matches('"');
                limits::check_len("JobBatchName", text, limits::MAX_NAME_BYTES)
                    .map_err(|e| e.to_string())?;
                self.attributes
                    .push(("JobBatchName".into(), format!("{text:?}")));
                Ok(())
            }
            "initialdir" => path(&mut self.initial_dir, "initialdir", value),
            "log" => path(&mut self.log, "log", value),
            "should_transfer_files" => one_of(
                "should_transfer_files",
                value,
                &["yes", "no", "if_needed", "true", "false"],
            ),
            "when_to_transfer_output" => {
                one_of(
                    "when_to_transfer_output",
                    value,
                    &["on_exit", "on_exit_or_evict"],
                )?;
                self.output_on_evict = value.trim().eq_ignore_ascii_case("on_exit_or_evict");
                Ok(())
            }
            "checkpoint_exit_code" => {
                let want = "an exit code from 1 to 255";
                self.checkpoint_exit_code =
                    Some(number_in("checkpoint_exit_code", value, 1..=255, want)?);
                Ok(())
            }
            "transfer_checkpoint_files" => {
                self.transfer_checkpoint_files = plain_names("transfer_checkpoint_files", value)?;
                Ok(())
            }
            "transfer_output_files" => {
                self.transfer_output_files = output_files(value)?;
                Ok(())
            }
            "max_start_failures" => {
                let want = "a whole number of tries from 1 to 1000";
                self.max_start_failures =
                    Some(number_in("max_start_failures", value, 1..=1000, want)?);
                Ok(())
            }
            "master_requirements" => {
                self.master_requirements = Some(master_requirements(value)?);
                Ok(())
            }
            _ => Err(format!("`{key}` is not an HTCondor command known here")),
        }
    }

    /// Sets job attribute `name` to ClassAd text `value` (checked by the
    /// caller), replacing an earlier value.
    pub fn set_attr(&mut self, name: &str, value: String) {
        match self.attributes.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value,
            None => self.attributes.push((name.to_string(), value)),
        }
    }

    fn attribute(&mut self, name: &str, value: &str) -> Result<(), String> {
        let name = name.trim();
        if name.is_empty()
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            || name.starts_with(|c: char| c.is_ascii_digit())
        {
            return Err(format!(
                "+{name}: not an attribute name (letters, digits and `_`)"
            ));
        }
        limits::check_len("attribute value", value, limits::MAX_EXPRESSION_BYTES)
            .map_err(|e| e.to_string())?;
        classad::parse_expr(value).map_err(|e| {
            format!(
                "+{name}: not a ClassAd expression (column {}: {}); strings need double quotes",
                e.column, e.message
            )
        })?;
        if self
            .attributes
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            return Err(format!("+{name} is set twice"));
        }
        limits::check_count(
            "job attributes",
            self.attributes.len() + 1,
            limits::MAX_JOB_ATTRIBUTES,
            "attributes",
        )
        .map_err(|e| e.to_string())?;
        self.attributes
            .push((name.to_string(), value.trim().to_string()));
        Ok(())
    }

    /// The job attributes the requests add (`RequestCpus`...), then the custom ones.
    pub fn job_attributes(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (name, v) in [
            ("RequestCpus", self.cpus),
            ("RequestMemory", self.memory_mib),
            ("RequestDisk", self.disk_kib),
            ("RequestGPUs", self.gpus),
        ] {
            if let Some(v) = v {
                out.push((name.to_string(), v.to_string()));
            }
        }
        out.extend(self.attributes.iter().cloned());
        out
    }

    /// Adds the resource requests to every class's requirements (given as
    /// the classes' `requirements` fields, so that this module needs no
    /// class type: the parser in [`crate::submit`] uses it, not the reverse).
    pub fn apply_requests<'a>(&self, requirements: impl IntoIterator<Item = &'a mut String>) {
        let mut terms = Vec::new();
        for (attr, v) in [
            ("Cpus", self.cpus),
            ("Memory", self.memory_mib),
            ("Disk", self.disk_kib),
            ("GPUs", self.gpus),
        ] {
            if let Some(v) = v {
                terms.push(format!("{attr} >= {v}"));
            }
        }
        if terms.is_empty() {
            return;
        }
        let extra = terms.join(" && ");
        for r in requirements {
            *r = if r.trim() == "true" {
                extra.clone()
            } else {
                format!("({r}) && {extra}")
            };
        }
    }
}

/// `notification`'s value as HTCondor's code: never 0, always 1, complete 2, error 3.
fn notification(value: &str) -> Result<String, String> {
    ["never", "always", "complete", "error"]
        .iter()
        .position(|n| value.trim().eq_ignore_ascii_case(n))
        .map(|code| code.to_string())
        .ok_or_else(|| format!("notification = {value}: expected Never, Always, Complete or Error"))
}

/// `concurrency_limits` as HTCondor stores them: lower case, no blanks, a ClassAd string.
fn concurrency_limits(value: &str) -> Result<String, String> {
    let v: String = value
        .trim()
        .trim_matches('"')
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_ascii_lowercase();
    limits::check_len("concurrency_limits", &v, limits::MAX_EXPRESSION_BYTES)
        .map_err(|e| e.to_string())?;
    Ok(format!("{v:?}"))
}

fn path(slot: &mut Option<String>, key: &str, value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("{key}: the path is empty"));
    }
    limits::check_len(key, value, limits::MAX_PATH_BYTES).map_err(|e| e.to_string())?;
    *slot = Some(value.to_string());
    Ok(())
}

fn one_of(key: &str, value: &str, allowed: &[&str]) -> Result<(), String> {
    if allowed.contains(&value.to_ascii_lowercase().as_str()) {
        Ok(())
    } else {
        Err(format!(
            "{key} = {value}: expected one of {}",
            allowed
                .iter()
                .map(|a| a.to_ascii_uppercase())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
}

/// A whole number with an optional unit (`K`, `M`, `G`, `T`, with or
/// without a trailing `B`), in units of `base` bytes; without a unit the
/// number is already in those units, as HTCondor reads it.
fn quantity(key: &str, value: &str, base: u64) -> Result<u64, String> {
    let v = value.trim();
    let split = v
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(v.len());
    let (digits, unit) = v.split_at(split);
    let whole = || format!("{key}: `{v}` is not a number (with an optional unit K, M, G, T)");
    let unit = unit.trim().to_ascii_uppercase();
    let unit = unit.strip_suffix('B').unwrap_or(&unit);
    let bytes: u64 = match unit {
        "" if !digits.contains('.') => return digits.parse().map_err(|_| whole()),
        "" => base,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        other => return Err(format!("{key}: unknown unit `{other}` (K, M, G or T)")),
    };
    if base == 1 {
        return Err(format!("{key}: a count is a whole number, with no unit"));
    }
    // `1.5GB`: HTCondor takes fractions of a unit and rounds up.
    let n: f64 = digits.parse().map_err(|_| whole())?;
    let units = (n * bytes as f64 / base as f64).ceil();
    if !units.is_finite() || units > u64::MAX as f64 / 2.0 {
        return Err(format!("{key}: `{v}` is too large"));
    }
    Ok(units as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_htcondor_reads_them() {
        assert_eq!(quantity("request_memory", "2048", 1 << 20), Ok(2048));
        assert_eq!(quantity("request_memory", "2GB", 1 << 20), Ok(2048));
        assert_eq!(quantity("request_memory", "2 G", 1 << 20), Ok(2048));
        assert_eq!(quantity("request_disk", "1M", 1 << 10), Ok(1024));
        assert_eq!(quantity("request_disk", "100", 1 << 10), Ok(100));
        assert_eq!(quantity("request_cpus", "4", 1), Ok(4));
        assert!(quantity("request_cpus", "4G", 1).is_err());
        assert!(quantity("request_memory", "lots", 1 << 20).is_err());
        assert!(quantity("request_memory", "3X", 1 << 20).is_err());
        assert!(quantity("request_memory", "99999999999999999T", 1 << 20).is_err());
        assert_eq!(quantity("request_memory", "1.5GB", 1 << 20), Ok(1536));
    }

    #[test]
    fn requests_join_every_class() {
        let mut e = Extras::default();
        e.set("request_cpus", "2").unwrap();
        e.set("Request_Memory", "1G").unwrap();
        let mut requirements = vec![
            "true".to_string(),
            "Arch == \"X86_64\" || HasGpu".to_string(),
        ];
        e.apply_requests(&mut requirements);
        assert_eq!(requirements[0], "Cpus >= 2 && Memory >= 1024");
        assert_eq!(
            requirements[1],
            "(Arch == \"X86_64\" || HasGpu) && Cpus >= 2 && Memory >= 1024"
        );
        assert_eq!(
            e.job_attributes(),
            [
                ("RequestCpus".to_string(), "2".to_string()),
                ("RequestMemory".to_string(), "1024".to_string())
            ]
        );
    }

    #[test]
    fn custom_attributes_and_their_mistakes() {
        let mut e = Extras::default();
        e.set("+Department", "\"physics\"").unwrap();
        e.set("MY.Priority", "10").unwrap();
        e.set("JobBatchName", "sweep-3").unwrap();
        assert_eq!(
            e.job_attributes(),
            [
                ("Department".to_string(), "\"physics\"".to_string()),
                ("Priority".to_string(), "10".to_string()),
                ("JobBatchName".to_string(), "\"sweep-3\"".to_string()),
            ]
        );
        assert!(e.set("+Department", "1").unwrap_err().contains("twice"));
        assert!(
            e.set("+Bad", "physics dept")
                .unwrap_err()
                .contains("double quotes")
        );
        assert!(
            e.set("+9x", "1")
                .unwrap_err()
                .contains("not an attribute name")
        );
        assert!(
            e.set("universe", "docker")
                .unwrap_err()
                .contains("only the vanilla")
        );
        assert!(e.set("universe", "Vanilla").is_ok());
        assert!(
            e.set("should_transfer_files", "sometimes")
                .unwrap_err()
                .contains("YES, NO, IF_NEEDED")
        );
        assert!(e.set("when_to_transfer_output", "ON_EXIT").is_ok());
    }
}
