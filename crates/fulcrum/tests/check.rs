//! `fulcrum check` and the configuration's files as a user writes them: every problem of a file
//! in one run, in the order of the file; `include`d files, read by check, run and a reload
//! alike; `${NAME}` from the environment.

use std::path::Path;
use std::time::{Duration, Instant};

mod common;
use common::{Running, TempDir, TempFile, fulcrum};

/// `fulcrum check FILE` with `env` set, run to its end: its exit code and stderr.
fn check(file: &Path, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let (code, _, stderr) = check_output(file, env);
    (code, stderr)
}

/// `fulcrum check FILE` with `env` set: its exit code, stdout and stderr.
fn check_output(file: &Path, env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut command = fulcrum();
    command.arg("check").arg(file);
    for (name, value) in env {
        command.env(name, value);
    }
    let out = command.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `file:line:col: ` of each problem printed, in order.
fn places(stderr: &str, file: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix(file)?.strip_prefix(':'))
        .filter_map(|rest| {
            let mut parts = rest.splitn(3, ':');
            let line: usize = parts.next()?.parse().ok()?;
            let col: usize = parts.next()?.parse().ok()?;
            Some(format!("{line}:{col}"))
        })
        .collect()
}

/// Issue 32's "what must show": a file with 12 seeded problems of the kinds that used to
/// hide one another or be misplaced, all 12 reported in one run, in the order of the file,
/// each with its line:col, and the count says 12.
#[test]
fn twelve_seeded_problems_in_one_run_in_file_order() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/check/twelve-problems.toml");
    let (code, stderr) = check(&file, &[]);
    assert_eq!(code, Some(1), "{stderr}");
    let shown = file.display().to_string();
    let places = places(&stderr, &shown);
    assert_eq!(
        places,
        [
            "1:11", "8:12", "11:10", "15:10", "20:13", "21:14", "22:1", "24:3", "29:12", "30:11",
            "31:17", "34:10"
        ],
        "{stderr}"
    );
    assert!(
        stderr.ends_with(&format!("12 problems in {shown}\n")),
        "{stderr}"
    );
    for not in ["weighted_round_robin", "the keys of", "invalid"] {
        assert!(!stderr.contains(not), "{not:?} in {stderr}");
    }
}

/// An unquoted address is a TOML syntax error: said in our words, with its place and the
/// line to write, and the rest of the file still checked.
#[test]
fn an_unquoted_listen_says_to_quote_it() {
    let text = "[[listener]]\nlisten = 127.0.0.1:18080\nupstream = \"web\"\n\n\
                [[upstream]]\nname = \"web\"\n  [[upstream.backend]]\n  addr = \"127.0.0.1:9001\"\n  weight = 0\n";
    let file = TempFile::new("unquoted.toml", text);
    let (code, stderr) = check(&file.0, &[]);
    assert_eq!(code, Some(1), "{stderr}");
    let shown = file.0.display();
    assert!(
        stderr.starts_with(&format!("{shown}:2:10: listen: a value that is not a number, true or false is written in quotes: write listen = \"127.0.0.1:18080\"\n")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "{shown}:9:12: upstream[0].backend[0].weight: must be between 1"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("invalid float"), "{stderr}");
}

const MAIN: &str = "include = [\"conf.d/*.toml\"]\naccess_log = false\n\n\
                    [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
                    [admin]\nlisten = \"127.0.0.1:0\"\n";

fn web(backend: &str) -> String {
    format!("[[upstream]]\nname = \"web\"\n\n  [[upstream.backend]]\n  addr = \"{backend}\"\n")
}

/// check reads the included files and the environment, and names the files a good
/// configuration was made of; a problem in an included file is shown at that file's line; an
/// unset variable is named at its value.
#[test]
fn check_reads_included_files_and_the_environment() {
    let dir = TempDir::new("check", "include");
    let main = dir.0.join("main.toml");
    std::fs::write(&main, MAIN).unwrap();
    std::fs::create_dir(dir.0.join("conf.d")).unwrap();
    let web_file = dir.0.join("conf.d/web.toml");
    std::fs::write(&web_file, web("${BACKEND}")).unwrap();

    // A good file says which files it was made of.
    let (code, stdout, stderr) = check_output(&main, &[("BACKEND", "127.0.0.1:9001")]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        format!(
            "{}: configuration is valid (with 1 included file: {})\n",
            main.display(),
            web_file.display()
        )
    );

    let (code, stderr) = check(&main, &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "{}:5:10: upstream[0].backend[0].addr: the environment variable BACKEND is not set",
            web_file.display()
        )),
        "{stderr}"
    );

    std::fs::write(
        dir.0.join("conf.d/zz-more.toml"),
        "access_log = true\n[[upstream]]\nname = \"web\"\n",
    )
    .unwrap();
    let (code, stderr) = check(&main, &[("BACKEND", "127.0.0.1:9001")]);
    assert_eq!(code, Some(1), "{stderr}");
    let more = dir.0.join("conf.d/zz-more.toml");
    for want in [
        format!(
            "{}:1:1: access_log: already set at {}:2",
            more.display(),
            main.display()
        ),
        format!(
            "{}:3:8: upstream[1].name: upstream \"web\" is already defined at {}:2",
            more.display(),
            web_file.display()
        ),
    ] {
        assert!(stderr.contains(&want), "{want:?} in:\n{stderr}");
    }
}

/// `fulcrum run` reads the included files, and a SIGHUP reads them again: a backend changed
/// in an included file only is in service after the reload.
#[test]
fn run_and_reload_read_the_included_files() {
    let dir = TempDir::new("check", "reload-include");
    let main = dir.0.join("main.toml");
    std::fs::write(&main, MAIN).unwrap();
    std::fs::create_dir(dir.0.join("conf.d")).unwrap();
    let web_file = dir.0.join("conf.d/web.toml");
    std::fs::write(&web_file, web("127.0.0.1:9001")).unwrap();
    // Running removes its file when dropped; the directory goes with `dir`.
    let config = TempFile(main);
    let fulcrum = Running::start(&config, 1);
    let admin = fulcrum
        .admin
        .expect("the admin listener's address is logged");
    let addrs = |admin| -> Vec<String> {
        common::backends_of(admin, "web")
            .iter()
            .map(|b| b["addr"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(addrs(admin), ["127.0.0.1:9001"]);

    std::fs::write(&web_file, web("127.0.0.1:9002")).unwrap();
    fulcrum.hangup();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let line = fulcrum.next_line(deadline);
        assert!(!line.contains("reload refused"), "{line}");
        if line.contains("configuration reloaded") {
            break;
        }
    }
    assert_eq!(addrs(admin), ["127.0.0.1:9002"]);
}
