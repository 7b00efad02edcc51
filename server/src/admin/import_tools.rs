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

/// The policy text for one tool.
pub fn policy_text(kind: &Kind, tool: &str, description: &str, downstream: &Downstream) -> String {
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
         expose = true         # listed in tools/list under the kind's name: a call to it waits for this quorum, then the gate runs it\n\
         # pass_through = [\"read_only_tool\"]   # other tools of this server that agents may call without approval\n\n",
    );
    out.push_str("[executor]\ntype = \"mcp\"\n");
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

/// Lists the downstream's tools and writes one policy per tool into `out`.
pub async fn import(
    downstream: &Downstream,
    out: &Path,
    prefix: &str,
    timeout: Duration,
) -> anyhow::Result<Vec<Imported>> {
    let tools = list_tools(downstream, None, timeout)
        .await
        .map_err(|e| anyhow::anyhow!("cannot list the tools of {}: {e}", downstream.describe()))?;
    std::fs::create_dir_all(out)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", out.display()))?;
    let mut done = Vec::new();
    for t in tools {
        let name = t.name.to_string();
        let kind = match Kind::parse(&format!("{prefix}.{name}")) {
            Ok(k) => k,
            Err(e) => {
                done.push(Imported::Skipped {
                    tool: name,
                    why: e.to_string(),
                });
                continue;
            }
        };
        let path = out.join(format!("{kind}.toml"));
        let text = policy_text(
            &kind,
            &name,
            t.description.as_deref().unwrap_or(""),
            downstream,
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
                done.push(Imported::Wrote(path));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                done.push(Imported::Kept(path))
            }
            Err(e) => return Err(anyhow::anyhow!("cannot create {}: {e}", path.display())),
        }
    }
    Ok(done)
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

/// `import-tools`: writes the policies and says what it wrote, kept and skipped.
pub async fn run(args: ImportToolsArgs) -> anyhow::Result<ExitCode> {
    logging("warn");
    let ImportToolsArgs {
        out,
        prefix,
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
    let done = import(&downstream, &out, &prefix, Duration::from_secs(timeout)).await?;
    let mut wrote = 0;
    for d in &done {
        match d {
            Imported::Wrote(p) => {
                wrote += 1;
                println!("wrote {}", p.display())
            }
            Imported::Kept(p) => println!("kept {} (exists; not overwritten)", p.display()),
            Imported::Skipped { tool, why } => println!("skipped tool {tool:?}: {why}"),
        }
    }
    println!(
        "{wrote} new policies in {}: fill in approvers and quorum in each, then run `approval-server check --policies {}`",
        out.display(),
        out.display()
    );
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
}
