//! The evidence table (`fulcrum evidence DIR... --out docs/evidence.md`): every load-aware
//! algorithm on every scenario, each cell its median p99 over the repetitions relative to the
//! row's best, with a 95% interval of that ratio from a paired bootstrap over the repetitions
//! ([`crate::stats::ratio_interval`]: a resample takes the same repetitions — the same
//! traffic — for both contenders).
//!
//! It is generated, never typed: it reads what `fulcrum sim` and `fulcrum lab run` wrote into
//! each results directory — `repetitions.csv` (every run's p99) and `provenance.toml` (the
//! scenario file, its seed and repetitions, simulator or lab, and the `--algorithms` given) —
//! and its preamble lists the command that produced each input, so every number can be made
//! again. Nothing in it depends on the date or the machine: the same inputs give the same
//! bytes.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::report::REPETITION_COLUMNS;
use crate::scenario::{AlgorithmSpec, Scenario};
use crate::stats;

/// The load-aware algorithms: the table's columns, in order, and what `bench/evidence.sh`
/// runs on every scenario. (One list: adding an algorithm is adding its name.)
pub const LOAD_AWARE: &[&str] = &[
    "least_conn",
    "random_two",
    "p2c_ewma",
    "least_time",
    "latency",
    "dwlc",
    "utilization_wrr",
    "prequal",
];

/// The file in a results directory that says how it was made.
pub const PROVENANCE: &str = "provenance.toml";

/// How a results directory was made: what [`Provenance::command`] turns back into a command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// `sim` (`fulcrum sim`) or `lab` (`fulcrum lab run`).
    pub tool: String,
    /// The scenario file, as given on the command line.
    pub scenario: PathBuf,
    /// The scenario's name.
    pub name: String,
    pub seed: u64,
    pub repetitions: u32,
    /// The `--algorithms` that replaced the scenario's contenders; empty: the scenario's own.
    #[serde(default)]
    pub algorithms: Vec<String>,
    /// The `--repetitions` that replaced the scenario's; none: the scenario's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetitions_given: Option<u32>,
}

impl Provenance {
    /// What made a results directory: `tool` run on `scenario` (already overridden), read
    /// from `file`, with the `--algorithms` and `--repetitions` given.
    pub fn of(
        tool: &str,
        file: &Path,
        scenario: &Scenario,
        algorithms: &[String],
        repetitions: Option<u32>,
    ) -> Provenance {
        Provenance {
            tool: tool.to_owned(),
            scenario: file.to_owned(),
            name: scenario.name.clone(),
            seed: scenario.seed,
            repetitions: scenario.repetitions,
            algorithms: algorithms.to_vec(),
            repetitions_given: repetitions,
        }
    }

    /// The command that writes these results into `out`.
    pub fn command(&self, out: &Path) -> String {
        let tool = if self.tool == "lab" { "lab run" } else { "sim" };
        let mut command = format!("fulcrum {tool} {}", self.scenario.display());
        if !self.algorithms.is_empty() {
            write!(command, " --algorithms {}", self.algorithms.join(",")).ok();
        }
        if let Some(n) = self.repetitions_given {
            write!(command, " --repetitions {n}").ok();
        }
        write!(command, " --out {}", out.display()).ok();
        command
    }

    /// Writes `provenance.toml` into `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), String> {
        let path = dir.join(PROVENANCE);
        let text = toml::to_string(self).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

/// What `--algorithms` takes for every algorithm of [`LOAD_AWARE`].
pub const LOAD_AWARE_NAME: &str = "load-aware";

/// Replaces the scenario's contenders by `names`, each one of fulcrum's algorithms at its
/// default options (`fulcrum sim --algorithms`, `fulcrum lab run --algorithms`;
/// [`LOAD_AWARE_NAME`] stands for [`LOAD_AWARE`]); an unknown name is an error that lists the
/// known ones.
pub fn override_algorithms(scenario: &mut Scenario, names: &[String]) -> Result<(), String> {
    let load_aware: Vec<String> = LOAD_AWARE.iter().map(|a| a.to_string()).collect();
    let names = match names {
        [one] if one == LOAD_AWARE_NAME => &load_aware[..],
        _ => names,
    };
    let mut specs = Vec::with_capacity(names.len());
    for name in names {
        name.parse::<balance::Algorithm>()
            .map_err(|e| format!("--algorithms: {e}"))?;
        if specs.iter().any(|s: &AlgorithmSpec| &s.name == name) {
            return Err(format!("--algorithms: {name:?} is named twice"));
        }
        specs.push(AlgorithmSpec {
            name: name.clone(),
            algorithm: None,
            compare: None,
            options: toml::Table::new(),
            instances: 1,
            spread: None,
            distinct_seeds: false,
        });
    }
    if specs.is_empty() {
        return Err("--algorithms: name at least one algorithm, such as least_conn".into());
    }
    scenario.algorithms = specs;
    Ok(())
}

/// One run of `repetitions.csv`.
#[derive(Debug, Clone, PartialEq)]
struct Run {
    contender: String,
    case: String,
    repetition: u32,
    p99_ms: f64,
}

/// A results directory, read.
#[derive(Debug, Clone)]
pub struct Source {
    /// As given on the command line (the preamble's commands write into it).
    pub dir: PathBuf,
    pub provenance: Provenance,
    runs: Vec<Run>,
}

/// Reads `dir`'s `provenance.toml` and `repetitions.csv`; an error names the file, the line
/// and what to do.
pub fn read(dir: &Path) -> Result<Source, String> {
    let file = dir.join(PROVENANCE);
    let text = std::fs::read_to_string(&file).map_err(|e| {
        format!(
            "cannot read {}: {e}; run the scenario again with `fulcrum sim` or `fulcrum lab run` (they write it)",
            file.display()
        )
    })?;
    let provenance: Provenance =
        toml::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let file = dir.join("repetitions.csv");
    let text = std::fs::read_to_string(&file).map_err(|e| {
        format!(
            "cannot read {}: {e}; run the scenario again (an older fulcrum did not write it)",
            file.display()
        )
    })?;
    Ok(Source {
        dir: dir.to_owned(),
        provenance,
        runs: parse_runs(&text).map_err(|e| format!("{}: {e}", file.display()))?,
    })
}

fn parse_runs(text: &str) -> Result<Vec<Run>, String> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    if header != REPETITION_COLUMNS {
        return Err(format!(
            "line 1: the header is not {}; write the file with this fulcrum",
            REPETITION_COLUMNS.join(",")
        ));
    }
    let at = |name: &str| header.iter().position(|h| *h == name).unwrap_or(0);
    let (contender, case, repetition, p99) =
        (at("contender"), at("case"), at("repetition"), at("p99_ms"));
    lines
        .enumerate()
        .filter(|(_, l)| !l.is_empty())
        .map(|(i, line)| {
            let cells: Vec<&str> = line.split(',').collect();
            let bad = |what: &str| format!("line {}: {what}: {line:?}", i + 2);
            if cells.len() != header.len() {
                return Err(bad(&format!("{} cells, not {}", cells.len(), header.len())));
            }
            Ok(Run {
                contender: cells[contender].to_owned(),
                case: cells[case].to_owned(),
                repetition: cells[repetition]
                    .parse()
                    .map_err(|_| bad("the repetition is not a count"))?,
                p99_ms: cells[p99]
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| bad("p99_ms is not a number"))?,
            })
        })
        .collect()
}

/// One row of the table: a scenario's case, and each load-aware algorithm's p99 per
/// repetition (`None`: not run).
struct TableRow<'s> {
    source: &'s Source,
    case: String,
    p99s: Vec<Option<Vec<(u32, f64)>>>,
}

/// A row per case of each source, in order; a contender that reads no load reports (named
/// without a delay) is in every delay's row ([`crate::report::group_cases`]).
fn rows(sources: &[Source]) -> Vec<TableRow<'_>> {
    let mut rows = Vec::new();
    for source in sources {
        let cases = crate::report::group_cases(
            source
                .runs
                .iter()
                .map(|r| (r.case.clone(), (r.case.as_str(), r.contender.as_str()))),
        );
        for (case, members) in cases {
            let p99s = LOAD_AWARE
                .iter()
                .map(|algorithm| {
                    let mut runs: Vec<(u32, f64)> = source
                        .runs
                        .iter()
                        .filter(|r| members.contains(&(r.case.as_str(), r.contender.as_str())))
                        .filter(|r| r.contender == *algorithm)
                        .map(|r| (r.repetition, r.p99_ms))
                        .collect();
                    runs.sort_by_key(|r| r.0);
                    (!runs.is_empty()).then_some(runs)
                })
                .collect();
            rows.push(TableRow {
                source,
                case: case.to_owned(),
                p99s,
            });
        }
    }
    rows
}

/// The p99s of `a` and `b` in the repetitions both ran, in pairs.
fn paired(a: &[(u32, f64)], b: &[(u32, f64)]) -> (Vec<f64>, Vec<f64>) {
    a.iter()
        .filter_map(|(r, x)| b.iter().find(|(s, _)| s == r).map(|(_, y)| (*x, *y)))
        .unzip()
}

/// A row's cells after its labels: the best median p99, then one per algorithm.
fn cells(row: &TableRow<'_>) -> Vec<String> {
    let medians: Vec<Option<f64>> = row
        .p99s
        .iter()
        .map(|p| {
            p.as_ref()
                .map(|runs| stats::median(&runs.iter().map(|r| r.1).collect::<Vec<_>>()))
        })
        .collect();
    let best = medians
        .iter()
        .enumerate()
        .filter_map(|(k, m)| m.map(|m| (k, m)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    let Some((best_k, best_p99)) = best else {
        return vec!["—".into(); LOAD_AWARE.len() + 1];
    };
    let best_runs = row.p99s[best_k].as_deref().unwrap_or_default();
    let mut out = vec![format!("{best_p99:.1}")];
    for (p99s, median) in row.p99s.iter().zip(&medians) {
        let (Some(runs), Some(median)) = (p99s, median) else {
            out.push("—".into());
            continue;
        };
        let ratio = stats::ratio(*median, best_p99);
        if *median == best_p99 {
            out.push(format!("**{ratio:.2}**"));
            continue;
        }
        let (a, b) = paired(runs, best_runs);
        out.push(match stats::ratio_interval(&a, &b) {
            Some(i) => format!("{ratio:.2} [{:.2}, {:.2}]", i.lo, i.hi),
            None => format!("{ratio:.2}"),
        });
    }
    out
}

/// `docs/evidence.md` from `sources`; `out` is where it goes and `dirs` the directories as
/// given (both named in its preamble).
pub fn markdown(sources: &[Source], out: &Path) -> String {
    let mut doc =
        String::from("# Evidence: the load-aware algorithms' p99, scenario by scenario\n\n");
    doc.push_str(
        "Generated by `fulcrum evidence` from the results listed below; do not edit it by hand — rerun the commands.\n\n",
    );
    writeln!(
        doc,
        "Each cell is the algorithm's median p99 over the repetitions divided by the row's best median p99 among the algorithms of the table (the best is **1.00**, in bold); in brackets, a 95% interval of that ratio from a paired bootstrap over the repetitions (each of {} resamples takes the same repetitions — the same traffic — for both; fixed seed). `—`: not run. With one repetition there is no interval. Only these algorithms count for the best; other contenders of a scenario (round robin, nginx, HAProxy) are left out.\n",
        stats::grouped(stats::RESAMPLES)
    )
    .ok();
    doc.push_str("The inputs, each made by one command (the seed as the scenario file sets it; repetition r replays seed + r):\n\n");
    for s in sources {
        let p = &s.provenance;
        writeln!(
            doc,
            "* `{}` — {}, seed {}, {} repetition{}",
            p.command(&s.dir),
            if p.tool == "lab" { "lab" } else { "simulator" },
            p.seed,
            p.repetitions,
            if p.repetitions == 1 { "" } else { "s" }
        )
        .ok();
    }
    let dirs: Vec<String> = sources
        .iter()
        .map(|s| s.dir.display().to_string())
        .collect();
    writeln!(
        doc,
        "\nthen `fulcrum evidence {} --out {}`.\n",
        dirs.join(" "),
        out.display()
    )
    .ok();
    write!(doc, "| scenario | case | by | best p99 ms |").ok();
    for a in LOAD_AWARE {
        write!(doc, " {a} |").ok();
    }
    writeln!(
        doc,
        "\n|---|---|---|---:|{}",
        "---:|".repeat(LOAD_AWARE.len())
    )
    .ok();
    for row in rows(sources) {
        let p = &row.source.provenance;
        writeln!(
            doc,
            "| {} | {} | {} | {} |",
            p.name.replace('|', "\\|"),
            row.case.replace('|', "\\|"),
            p.tool,
            cells(&row).join(" | ")
        )
        .ok();
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_read_or_the_line_is_named() {
        let good = format!(
            "{}\nleast_conn λ=0.90,least_conn,λ=0.90,1,8,100,1.0,2.0,3.0,4.5,0,0\n",
            REPETITION_COLUMNS.join(",")
        );
        let runs = parse_runs(&good).unwrap();
        assert_eq!(
            runs,
            vec![Run {
                contender: "least_conn".into(),
                case: "λ=0.90".into(),
                repetition: 1,
                p99_ms: 4.5
            }]
        );
        let e = parse_runs("algorithm,p99\n").unwrap_err();
        assert!(
            e.starts_with("line 1: the header is not algorithm,contender"),
            "{e}"
        );
        let short = format!("{}\na,b\n", REPETITION_COLUMNS.join(","));
        assert!(
            parse_runs(&short)
                .unwrap_err()
                .starts_with("line 2: 2 cells, not 12")
        );
        let nan = good.replace("4.5", "x");
        assert!(
            parse_runs(&nan)
                .unwrap_err()
                .contains("p99_ms is not a number")
        );
    }

    #[test]
    fn algorithms_are_overridden_or_the_known_ones_listed() {
        let mut s = Scenario::parse(
            "[[backend]]\nname = \"b\"\n[traffic]\npattern = \"constant:1\"\nduration = \"1s\"\n[[algorithm]]\nname = \"round_robin\"\n",
            "t",
        )
        .unwrap();
        override_algorithms(&mut s, &["least_conn".into(), "dwlc".into()]).unwrap();
        let names: Vec<&str> = s.algorithms.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["least_conn", "dwlc"]);
        let e = override_algorithms(&mut s, &["fastest".into()]).unwrap_err();
        assert!(
            e.contains("unknown algorithm \"fastest\"") && e.contains("least_conn"),
            "{e}"
        );
        assert!(override_algorithms(&mut s, &["dwlc".into(), "dwlc".into()]).is_err());
        assert_eq!(s.algorithms.len(), 2, "unchanged by an error");
        override_algorithms(&mut s, &[LOAD_AWARE_NAME.into()]).unwrap();
        assert_eq!(s.algorithms.len(), LOAD_AWARE.len());
        for name in LOAD_AWARE {
            assert!(name.parse::<balance::Algorithm>().is_ok(), "{name}");
        }
    }

    #[test]
    fn provenance_gives_the_command_back() {
        let p = Provenance {
            tool: "sim".into(),
            scenario: "lab/scenarios/sim-stale.toml".into(),
            name: "sim-stale".into(),
            seed: 1,
            repetitions: 40,
            algorithms: vec!["least_conn".into(), "dwlc".into()],
            repetitions_given: Some(40),
        };
        assert_eq!(
            p.command(Path::new("out/sim-stale")),
            "fulcrum sim lab/scenarios/sim-stale.toml --algorithms least_conn,dwlc --repetitions 40 --out out/sim-stale"
        );
        let lab = Provenance {
            tool: "lab".into(),
            algorithms: vec![],
            repetitions_given: None,
            ..p.clone()
        };
        assert_eq!(
            lab.command(Path::new("o")),
            "fulcrum lab run lab/scenarios/sim-stale.toml --out o"
        );
        assert_eq!(
            toml::from_str::<Provenance>(&toml::to_string(&p).unwrap()).unwrap(),
            p
        );
    }
}
