//! `approval-server import-tools`: one commented policy per tool of a downstream MCP
//! server, so gating a whole server takes minutes.
//!
//! Each file is `<out>/<prefix>.<tool>.toml` with kind `<prefix>.<tool>`, the tool's
//! description, an `mcp` executor calling that tool, `payload_schema_from_tool =
//! true` (the tool's own inputSchema checks every payload before anyone signs) and
//! `expose = true` (agents call it under the kind's name and wait for the quorum). The
//! approvers and the quorum are left for a human to fill in: until they are, the file
//! refuses to load (`approval-server check` names the line), so nothing is gated by
//! rules nobody chose. An existing file is never overwritten.
//!
//! A server offers more tools than most deployments gate (the git server twelve, the
//! filesystem server fourteen), and each unfilled file stops `check` and `serve`; so
//! `--tool NAME` picks the tools to gate and `--pass-through NAME` the ones agents call
//! directly, written into the first new policy's `pass_through` (one name, one policy:
//! PROTOCOL §4). The commands printed last run as printed, `--keys` included.

use super::shared::logging;
use crate::executor::mcp::{list_tools, Downstream};
use approval_core::Kind;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// What happened to one tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Imported {
    /// A new policy file.
    Wrote(PathBuf),
    /// The file exists and was left as it was.
    Kept(PathBuf),
    /// The tool's name cannot be part of a kind.
    Skipped {
        /// The tool.
        tool: String,
        /// Why.
        why: String,
    },
}

/// A TOML basic string (JSON string escapes are valid TOML escapes).
fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// The `pass_through` line of a policy: the list when this policy carries it, else a
/// commented example (a name may be in one policy only, so only one file lists them).
fn pass_through_line(pass_through: &[String]) -> String {
    if pass_through.is_empty() {
        return "# pass_through = [\"read_only_tool\"]   # other tools of this server that agents may call without approval (one policy lists them)\n".into();
    }
    let names: Vec<String> = pass_through.iter().map(|n| toml_str(n)).collect();
    format!(
        "pass_through = [{}]   # other tools of this server that agents call directly, without approval\n",
        names.join(", ")
    )
}

/// The policy text for one tool; `pass_through` is written into this policy (empty:
/// another one holds the list, or there is none).
pub fn policy_text(
    kind: &Kind,
    tool: &str,
    description: &str,
    downstream: &Downstream,
    pass_through: &[String],
) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "# Gates the tool {tool:?} of the MCP server {}.\n",
        downstream.describe()
    ));
    for line in description.lines().filter(|l| !l.trim().is_empty()) {
        out.push_str(&format!("# {}\n", line.trim_end()));
    }
    out.push_str(
        "#\n# Written by `approval-server import-tools`. Fill in approvers and quorum (this file\n\
         # refuses to load until you do), then `approval-server check` and reload (SIGHUP).\n",
    );
    out.push_str(&format!("kind = {}\n", toml_str(kind.as_str())));
    let desc = description.split_whitespace().collect::<Vec<_>>().join(" ");
    out.push_str(&format!("description = {}\n", toml_str(&desc)));
    out.push_str(
        "approvers = []        # FILL IN: names from the keyring, e.g. [\"alice\", \"bob\"]\n\
         quorum = 0            # FILL IN: how many distinct approvers must sign (1 to the number of approvers)\n\
         vetoes = 1            # one rejection ends a proposal\n\
         ttl = \"30m\"           # how long a proposal may wait for quorum\n\
         execute_within = \"10m\" # how long an approval stays executable\n\
         expose = true         # listed in tools/list under the kind's name: a call to it waits for this quorum, then the gate runs it\n",
    );
    out.push_str(&pass_through_line(pass_through));
    out.push_str("\n[executor]\ntype = \"mcp\"\n");
    match downstream {
        Downstream::Command { argv, .. } => {
            let argv: Vec<String> = argv.iter().map(|a| toml_str(a)).collect();
            out.push_str(&format!("command = [{}]\n", argv.join(", ")));
            out.push_str(
                "# env_from = { API_TOKEN = \"GATE_VARIABLE\" }   # values come from the gate's environment, never written here\n",
            );
        }
        Downstream::Url { url, .. } => {
            out.push_str(&format!("url = {}\n", toml_str(url)));
            out.push_str(
                "# headers_from = { Authorization = \"GATE_VARIABLE\" }   # values come from the gate's environment, never written here\n",
            );
        }
    }
    out.push_str(&format!("tool = {}\n", toml_str(tool)));
    out.push_str(
        "timeout = \"60s\"       # after the call is sent, no answer by then is OUTCOME_UNKNOWN\n",
    );
    out.push_str(
        "payload_schema_from_tool = true   # the tool's inputSchema checks each payload at prepare time\n",
    );
    out
}

/// Which of the server's tools the operator named: `--tool` and `--pass-through`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// The tools to gate, each a kind of its own; empty: every tool the server offers
    /// that is not passed through.
    pub tools: Vec<String>,
    /// The tools agents call directly, without approval.
    pub pass_through: Vec<String>,
}

/// The names once each, in the order first given.
fn once(names: &[String]) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    names
        .iter()
        .filter(|n| seen.insert(n.as_str()))
        .cloned()
        .collect()
}

impl Selection {
    /// The tools to gate, in order, checked against what the server `offered`: a name
    /// the server does not offer, a tool both gated and passed through, or nothing
    /// left to gate is refused before any file is written. A pass-through list lives
    /// in a gated tool's policy, so at least one tool must be gated.
    pub fn gated(&self, offered: &[String]) -> Result<Vec<String>, String> {
        let tools = once(&self.tools);
        let pass = once(&self.pass_through);
        let unknown: Vec<String> = tools
            .iter()
            .map(|n| ("--tool", n))
            .chain(pass.iter().map(|n| ("--pass-through", n)))
            .filter(|(_, n)| !offered.contains(n))
            .map(|(flag, n)| format!("{flag} {n:?}"))
            .collect();
        if !unknown.is_empty() {
            return Err(format!(
                "the server offers no such tool: {}; it offers: {}",
                unknown.join(", "),
                offered.join(", ")
            ));
        }
        if let Some(both) = tools.iter().find(|n| pass.contains(n)) {
            return Err(format!(
                "{both:?} is given both as --tool and as --pass-through: a pass-through tool is \
                 called without approval, so it cannot also be a gated kind; keep one of the two"
            ));
        }
        let gated: Vec<String> = if tools.is_empty() {
            offered
                .iter()
                .filter(|n| !pass.contains(n))
                .cloned()
                .collect()
        } else {
            tools
        };
        if gated.is_empty() {
            return Err(format!(
                "nothing is left to gate: every tool the server offers is --pass-through, and a \
                 pass-through list lives in a gated tool's policy; name the tools to gate with \
                 --tool (the server offers: {})",
                offered.join(", ")
            ));
        }
        Ok(gated)
    }
}

/// What `import` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// One entry per gated tool.
    pub done: Vec<Imported>,
    /// The pass-through tools asked for.
    pub pass_through: Vec<String>,
    /// The new policy that lists them; `None` when none was asked for, or when every
    /// gated tool's file existed (then nothing lists them: the operator adds them).
    pub pass_through_in: Option<PathBuf>,
    /// Pass-through tools a policy already in the folder lists, with that policy.
    pub already: Vec<(String, PathBuf)>,
}

/// The pass-through names the policies already in `dir` list, with their file. A file
/// that cannot be read or parsed lists none here; `check` reports it.
fn listed_pass_through(dir: &Path) -> std::collections::BTreeMap<String, PathBuf> {
    let mut listed = std::collections::BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return listed;
    };
    for path in entries.flatten().map(|e| e.path()) {
        if path.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let Some(table) = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.parse::<toml::Table>().ok())
        else {
            continue;
        };
        let names = table.get("pass_through").and_then(|v| v.as_array());
        for name in names.into_iter().flatten().filter_map(|v| v.as_str()) {
            listed.insert(name.to_owned(), path.clone());
        }
    }
    listed
}

/// Lists the downstream's tools and writes one policy per gated tool into `out`, the
/// first new one listing the pass-through tools.
pub async fn import(
    downstream: &Downstream,
    out: &Path,
    prefix: &str,
    timeout: Duration,
    selection: &Selection,
) -> anyhow::Result<Report> {
    let tools = list_tools(downstream, None, timeout)
        .await
        .map_err(|e| anyhow::anyhow!("cannot list the tools of {}: {e}", downstream.describe()))?;
    let offered: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    let gated = selection.gated(&offered).map_err(anyhow::Error::msg)?;
    // A tool named with --tool must make a kind; one only swept in by default is skipped.
    for name in selection.tools.iter() {
        if let Err(e) = Kind::parse(&format!("{prefix}.{name}")) {
            anyhow::bail!("--tool {name:?} cannot make a kind with --prefix {prefix:?}: {e}");
        }
    }
    std::fs::create_dir_all(out)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", out.display()))?;
    // A name already passed through by a policy in `out` (an earlier run) is not
    // written again: one name in two policies would refuse the folder's load.
    let listed = listed_pass_through(out);
    let (already, pass_through): (Vec<String>, Vec<String>) = once(&selection.pass_through)
        .into_iter()
        .partition(|n| listed.contains_key(n));
    let mut report = Report {
        done: Vec::new(),
        pass_through: pass_through.clone(),
        pass_through_in: None,
        already: already
            .into_iter()
            .filter_map(|n| listed.get(&n).map(|p| (n, p.clone())))
            .collect(),
    };
    // A tool an earlier policy passes through is called without approval: a gating
    // policy for it beside that list would read as a gate that is not there.
    if let Some((name, file)) = gated
        .iter()
        .filter(|n| selection.tools.contains(n))
        .find_map(|n| listed.get(n).map(|f| (n, f)))
    {
        anyhow::bail!(
            "--tool {name:?} is passed through (called without approval) by {}: remove it \
             from that policy's pass_through first, then gate it",
            file.display()
        );
    }
    for name in gated {
        let Some(t) = tools.iter().find(|t| t.name == name) else {
            continue;
        };
        if let Some(file) = listed.get(&name) {
            report.done.push(Imported::Skipped {
                tool: name,
                why: format!(
                    "passed through by {} (called without approval); to gate it, remove it \
                     there and run again with --tool",
                    file.display()
                ),
            });
            continue;
        }
        let kind = match Kind::parse(&format!("{prefix}.{name}")) {
            Ok(k) => k,
            Err(e) => {
                report.done.push(Imported::Skipped {
                    tool: name,
                    why: e.to_string(),
                });
                continue;
            }
        };
        let path = out.join(format!("{kind}.toml"));
        let carries = report.pass_through_in.is_none();
        let text = policy_text(
            &kind,
            &name,
            t.description.as_deref().unwrap_or(""),
            downstream,
            if carries { &pass_through } else { &[] },
        );
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut f) => {
                f.write_all(text.as_bytes())
                    .and_then(|_| f.sync_all())
                    .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
                if carries && !pass_through.is_empty() {
                    report.pass_through_in = Some(path.clone());
                }
                report.done.push(Imported::Wrote(path));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                report.done.push(Imported::Kept(path))
            }
            Err(e) => return Err(anyhow::anyhow!("cannot create {}: {e}", path.display())),
        }
    }
    Ok(report)
}

/// The flags of `import-tools`.
#[derive(clap::Args)]
pub struct ImportToolsArgs {
    /// Folder to write the policies into (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Kind prefix: the kinds are `<prefix>.<tool>`.
    #[arg(long, default_value = "mcp")]
    prefix: String,
    /// A tool to gate (repeatable); without it, every tool the server offers that is
    /// not --pass-through.
    #[arg(long = "tool", value_name = "NAME")]
    tools: Vec<String>,
    /// A tool agents call directly, without approval (repeatable); written into the
    /// first new policy's `pass_through`.
    #[arg(long = "pass-through", value_name = "NAME")]
    pass_through: Vec<String>,
    /// The keyring the printed `check` and `serve` commands name (nothing reads it here).
    #[arg(long, default_value = "keys")]
    keys: PathBuf,
    /// A Streamable HTTP MCP endpoint, e.g. https://tools.example.com/mcp
    #[arg(long, conflicts_with = "command", required_unless_present = "command")]
    url: Option<String>,
    /// A stdio MCP server's command line, run without a shell. Put it last: every
    /// argument after --command is part of it.
    #[arg(long, num_args = 1.., allow_hyphen_values = true, value_name = "PROGRAM ARGS")]
    command: Option<Vec<String>>,
    /// Seconds to wait for the server's tool list.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
}

/// A path as a shell word: as it is when it holds nothing a shell reads, else in
/// single quotes, so a printed command runs when pasted.
fn shell_word(path: &Path) -> String {
    let s = path.display().to_string();
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./:=@%+,".contains(c));
    if plain {
        s
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// What to do next, as commands that run as printed from the folder `import-tools`
/// ran in: `check` and `serve` with the same policies folder and the keyring.
pub fn next_steps(out: &Path, keys: &Path, keys_exist: bool) -> String {
    let (out, keys_w) = (shell_word(out), shell_word(keys));
    let mut s = String::new();
    if !keys_exist {
        s.push_str(&format!(
            "No keyring at {keys_w} yet: each approver runs `signer-cli keygen --name NAME` on their own machine and sends you the line it prints; put the lines in {keys_w}.\n"
        ));
    }
    s.push_str(&format!(
        "Next: fill in approvers and quorum in each new policy (each refuses to load until you do), then\n  \
         approval-server check --policies {out} --keys {keys_w}\n  \
         approval-server serve --data data --policies {out} --keys {keys_w}\n"
    ));
    s
}

/// `import-tools`: writes the policies and says what it wrote, kept and skipped, and
/// the commands to run next.
pub async fn run(args: ImportToolsArgs) -> anyhow::Result<ExitCode> {
    logging("warn");
    let ImportToolsArgs {
        out,
        prefix,
        tools,
        pass_through,
        keys,
        url,
        command,
        timeout,
    } = args;
    let downstream = match (command, url) {
        (Some(argv), _) => Downstream::Command {
            argv,
            env_from: Default::default(),
        },
        (None, Some(url)) => Downstream::Url {
            url,
            headers_from: Default::default(),
        },
        (None, None) => anyhow::bail!("give --command PROGRAM ARGS... or --url URL"),
    };
    let selection = Selection {
        tools,
        pass_through,
    };
    let report = import(
        &downstream,
        &out,
        &prefix,
        Duration::from_secs(timeout),
        &selection,
    )
    .await?;
    let mut wrote = 0;
    for d in &report.done {
        match d {
            Imported::Wrote(p) => {
                wrote += 1;
                if report.pass_through_in.as_ref() == Some(p) {
                    println!(
                        "wrote {} (pass_through: {})",
                        p.display(),
                        report.pass_through.join(", ")
                    )
                } else {
                    println!("wrote {}", p.display())
                }
            }
            Imported::Kept(p) => println!("kept {} (exists; not overwritten)", p.display()),
            Imported::Skipped { tool, why } => println!("skipped tool {tool:?}: {why}"),
        }
    }
    for (name, path) in &report.already {
        println!("{name:?} already passes through in {}", path.display());
    }
    if !report.pass_through.is_empty() && report.pass_through_in.is_none() {
        println!(
            "pass_through not written: every policy file existed; add `pass_through = [{}]` to one of them (one policy only)",
            report
                .pass_through
                .iter()
                .map(|n| toml_str(n))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let noun = if wrote == 1 { "policy" } else { "policies" };
    println!("{wrote} new {noun} in {}", out.display());
    print!("{}", next_steps(&out, &keys, keys.is_file()));
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use approval_core::Policy;

    #[test]
    fn generated_policy_refuses_to_load_until_filled_in_then_loads() {
        let d = Downstream::Command {
            argv: vec!["node".into(), "a \"quoted\" path\\x".into(), "/srv".into()],
            env_from: Default::default(),
        };
        let kind = Kind::parse("fs.write_file").unwrap();
        let text = policy_text(
            &kind,
            "write_file",
            "Create a new file.\nOverwrites \"existing\" files.",
            &d,
            &[],
        );
        let e = Policy::parse_toml("fs.write_file.toml", &text).unwrap_err();
        assert!(e.message.contains("approvers is empty"), "{e}");
        let filled = text
            .replace("approvers = []", "approvers = [\"alice\"]")
            .replace("quorum = 0", "quorum = 1");
        let p = Policy::parse_toml("fs.write_file.toml", &filled).unwrap();
        assert_eq!(p.spec().executor.mcp_tool(), Some("write_file"));
        assert!(p.spec().executor.schema_from_tool());
        assert!(p.spec().expose, "an imported tool is a tool of its own");
        assert!(p.spec().pass_through.is_empty());
        assert_eq!(
            p.spec().description,
            "Create a new file. Overwrites \"existing\" files."
        );
        let approval_core::policy::ExecutorConfig::Mcp { command, .. } = &p.spec().executor else {
            panic!("not mcp")
        };
        assert_eq!(command.as_ref().unwrap()[1], "a \"quoted\" path\\x");
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn selection_gates_the_named_tools_or_all_but_the_passed_through() {
        let offered = names(&["read_file", "write_file", "edit_file", "list_directory"]);
        let all = Selection::default();
        assert_eq!(all.gated(&offered).unwrap(), offered);
        let some = Selection {
            tools: names(&["edit_file", "write_file", "edit_file"]),
            pass_through: names(&["read_file"]),
        };
        assert_eq!(
            some.gated(&offered).unwrap(),
            names(&["edit_file", "write_file"])
        );
        let rest = Selection {
            tools: vec![],
            pass_through: names(&["read_file", "list_directory"]),
        };
        assert_eq!(
            rest.gated(&offered).unwrap(),
            names(&["write_file", "edit_file"])
        );
    }

    #[test]
    fn selection_refuses_unknown_names_an_overlap_and_nothing_to_gate() {
        let offered = names(&["read_file", "write_file"]);
        let unknown = Selection {
            tools: names(&["write_fil"]),
            pass_through: names(&["read"]),
        };
        let e = unknown.gated(&offered).unwrap_err();
        assert_eq!(
            e,
            "the server offers no such tool: --tool \"write_fil\", --pass-through \"read\"; \
             it offers: read_file, write_file"
        );
        let both = Selection {
            tools: names(&["write_file"]),
            pass_through: names(&["write_file"]),
        };
        let e = both.gated(&offered).unwrap_err();
        assert!(
            e.starts_with("\"write_file\" is given both as --tool and as --pass-through"),
            "{e}"
        );
        let none = Selection {
            tools: vec![],
            pass_through: offered.clone(),
        };
        let e = none.gated(&offered).unwrap_err();
        assert!(e.starts_with("nothing is left to gate"), "{e}");
    }

    #[test]
    fn the_pass_through_list_is_written_into_the_policy_and_loads() {
        let d = Downstream::Url {
            url: "http://127.0.0.1:9/mcp".into(),
            headers_from: Default::default(),
        };
        let kind = Kind::parse("fs.write_file").unwrap();
        let pass = names(&["read_text_file", "list_directory"]);
        let text = policy_text(&kind, "write_file", "Write.", &d, &pass)
            .replace("approvers = []", "approvers = [\"alice\"]")
            .replace("quorum = 0", "quorum = 1");
        let p = Policy::parse_toml("fs.write_file.toml", &text).unwrap();
        assert_eq!(p.spec().pass_through, pass);
        assert!(p.spec().expose);
    }

    #[test]
    fn next_steps_name_the_keyring_and_quote_what_a_shell_would_split() {
        let s = next_steps(Path::new("policies"), Path::new("keys"), true);
        assert!(
            s.contains("\n  approval-server check --policies policies --keys keys\n"),
            "{s}"
        );
        assert!(
            s.contains("\n  approval-server serve --data data --policies policies --keys keys\n"),
            "{s}"
        );
        assert!(!s.contains("No keyring"), "{s}");
        let s = next_steps(Path::new("my policies"), Path::new("it's/keys"), false);
        assert!(s.starts_with("No keyring at 'it'\\''s/keys' yet"), "{s}");
        assert!(
            s.contains("check --policies 'my policies' --keys 'it'\\''s/keys'\n"),
            "{s}"
        );
    }

    #[test]
    fn names_a_policy_in_the_folder_passes_through_are_found_and_broken_files_ignored() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("fs.write_file.toml"),
            "kind = \"fs.write_file\"\npass_through = [\"read_file\", \"list_directory\"]\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("broken.toml"), "pass_through = [").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "pass_through = [\"x\"]").unwrap();
        let listed = listed_pass_through(dir.path());
        assert_eq!(
            listed.keys().collect::<Vec<_>>(),
            ["list_directory", "read_file"]
        );
        assert_eq!(listed["read_file"], dir.path().join("fs.write_file.toml"));
        assert!(listed_pass_through(&dir.path().join("missing")).is_empty());
    }
}
