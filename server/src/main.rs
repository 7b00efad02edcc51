//! The `approval-server` command line. Every subcommand is a thin call into the library.

use anyhow::Context;
use approval_server::config::ConfigSource;
use approval_server::run::{self, ServeOptions};
use approval_server::store::{PgStore, SledStore, Store};
use approval_server::{agents, audit, audit_remote, demo, init, stdio};
use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc rather than glibc malloc: see the workspace `Cargo.toml` and BENCHMARKS.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "approval-server",
    version,
    about = "An MCP approval gate: agents propose, a quorum of humans signs, the action runs once."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct Rules {
    /// Folder of policies, one TOML file per action kind.
    #[arg(long, default_value = "./policies")]
    policies: PathBuf,
    /// Keyring: one `<name> ed25519 <base64 key>` line per approver.
    #[arg(long, default_value = "./keys")]
    keys: PathBuf,
}

/// Notifications: the server's side (the relay, secrets and defaults never come from a policy).
#[derive(clap::Args, Debug)]
struct NotifyArgs {
    /// SMTP relay for `type = "email"` channels: `smtp://host:2525` (plain, local relay),
    /// `smtp://user:pass@host:587?tls=required` (STARTTLS), `smtps://user:pass@host`.
    #[arg(
        long,
        value_name = "URL",
        env = "APPROVAL_SMTP_URL",
        hide_env_values = true
    )]
    smtp: Option<String>,
    /// Sender address of notification mail.
    #[arg(
        long,
        value_name = "ADDRESS",
        default_value = "approval-gate@localhost"
    )]
    smtp_from: String,
    /// A TOML file of `[[notify]]` tables for every kind whose policy has none.
    #[arg(long, value_name = "FILE", env = "APPROVAL_NOTIFY_DEFAULT")]
    notify_default: Option<PathBuf>,
    /// Most queued notifications; past it, changes still commit and their notifications are dropped (counted in /healthz).
    #[arg(long, default_value_t = approval_server::notify::DEFAULT_OUTBOX_CAP)]
    notify_outbox_cap: u64,
    /// Retry timings in milliseconds: first back-off, longest back-off, give-up age,
    /// delivery time-out, outbox poll (tests shorten them).
    #[arg(
        long,
        hide = true,
        env = "APPROVAL_NOTIFY_TIMINGS_MS",
        value_delimiter = ',',
        num_args = 5
    )]
    notify_timings_ms: Option<Vec<u64>>,
}

impl NotifyArgs {
    fn options(self) -> anyhow::Result<approval_server::notify::NotifyOptions> {
        let mut o = approval_server::notify::NotifyOptions {
            smtp: self.smtp.filter(|s| !s.is_empty()),
            smtp_from: self.smtp_from,
            cap: self.notify_outbox_cap,
            ..Default::default()
        };
        if let Some(f) = &self.notify_default {
            o.default_channels = approval_server::notify::read_defaults(f)?;
        }
        if let Some(t) = self.notify_timings_ms {
            let ms = |i: usize| {
                std::time::Duration::from_millis(t.get(i).copied().unwrap_or(1000).max(1))
            };
            (o.retry_base, o.retry_max, o.give_up, o.timeout, o.tick) =
                (ms(0), ms(1), ms(2), ms(3), ms(4));
        }
        Ok(o)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run the service.
    Serve {
        /// Store folder (created if missing). With --store postgres://…, it keeps only
        /// this instance's local files (executors' output, endpoint.json).
        #[arg(long, default_value = "./data")]
        data: PathBuf,
        /// Where the store is: `sled:DIR` (the embedded store, the same as --data DIR)
        /// or `postgres://USER[:PASSWORD]@HOST:PORT/DATABASE`, shared by several
        /// instances (run `approval-server migrate --store URL` first).
        #[arg(
            long,
            env = "APPROVAL_STORE",
            hide_env_values = true,
            value_name = "STORE"
        )]
        store: Option<run::StoreSpec>,
        /// On PostgreSQL: seconds an execution claim stays leased without renewal. An
        /// instance that dies mid-execution leaves its claim; another instance ends it
        /// OUTCOME_UNKNOWN this long after its last renewal (never re-runs it).
        #[arg(long, default_value_t = 30, value_name = "SECONDS")]
        claim_lease: u64,
        #[command(flatten)]
        rules: Rules,
        /// Agents file: `<name> <sha256 of token>` lines. Without it, only loopback clients, as `local`.
        #[arg(long)]
        agents: Option<PathBuf>,
        /// Address for /mcp (and the approver API unless --approver-listen). Port 0 picks a free port.
        #[arg(long, default_value = "127.0.0.1:4800")]
        listen: SocketAddr,
        /// Separate address for the approver API, so laptops can reach it while /mcp stays on loopback.
        #[arg(long)]
        approver_listen: Option<SocketAddr>,
        /// Extra Host header value accepted on /mcp (repeatable), e.g. when behind a proxy.
        #[arg(long)]
        allowed_host: Vec<String>,
        /// Origin accepted on /mcp (repeatable). By default any request with an Origin header is refused.
        #[arg(long)]
        allowed_origin: Vec<String>,
        /// Most PENDING proposals one agent may have; more are refused with LIMIT_EXCEEDED.
        #[arg(long, default_value_t = 10_000)]
        max_pending_per_agent: u64,
        /// Most PENDING proposals in all.
        #[arg(long, default_value_t = 1_000_000)]
        max_pending: u64,
        #[command(flatten)]
        notify: NotifyArgs,
    },
    /// Start with the example policies and three demo approvers (keys in ./demo-keys).
    Demo {
        /// Address to listen on (another port if 4800 is taken, e.g. 127.0.0.1:4801).
        #[arg(long, default_value = "127.0.0.1:4800")]
        listen: SocketAddr,
        /// Folder of policies, reloaded on SIGHUP [default: ./policies if it exists,
        /// else built-in copies of the repository's example policies].
        #[arg(long)]
        policies: Option<PathBuf>,
        /// Agents file (`approval-server agent add NAME --agents FILE`); without it,
        /// only loopback clients, as `local`. Reloaded on SIGHUP.
        #[arg(long)]
        agents: Option<PathBuf>,
        /// Store folder.
        #[arg(long, default_value = "./data")]
        data: PathBuf,
        /// Where the demo keys go.
        #[arg(long, default_value = "./demo-keys")]
        keys_dir: PathBuf,
    },
    /// MCP over stdin/stdout for a host that launches its servers: runs the gate in this
    /// process (approver API on --listen, endpoint lines on stderr), or joins the server
    /// that already holds --data, or, with --connect, bridges to that service.
    Stdio {
        /// Always bridge to this MCP endpoint, e.g. http://127.0.0.1:4800/mcp
        #[arg(long, conflicts_with_all = ["listen", "agents", "policies", "keys", "data"])]
        connect: Option<String>,
        /// Agent token (or APPROVAL_AGENT_TOKEN): sent to a joined server; checked against --agents when the gate runs here.
        #[arg(long, env = "APPROVAL_AGENT_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Store folder: the gate runs here unless a running server holds it.
        #[arg(long, default_value = "./data")]
        data: PathBuf,
        #[command(flatten)]
        rules: Rules,
        /// Agents file; then this session needs --token. Without it, the session is the agent `local`.
        #[arg(long)]
        agents: Option<PathBuf>,
        /// Approver API and /mcp of the gate run here [default: 127.0.0.1:4800, or a free port when taken].
        #[arg(long)]
        listen: Option<SocketAddr>,
    },
    /// Scaffold a deployment folder: example policy, keyring, agents file. Never overwrites.
    Init {
        /// Folder to fill (created if missing).
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Create or upgrade the PostgreSQL store's schema (versioned migrations, each in
    /// one transaction; safe to run from several places at once). `serve` refuses a
    /// database whose schema is older or newer than it knows.
    Migrate {
        /// postgres://USER[:PASSWORD]@HOST:PORT/DATABASE
        #[arg(
            long,
            env = "APPROVAL_STORE",
            hide_env_values = true,
            value_name = "URL"
        )]
        store: String,
    },
    /// Validate policies and keyring; exits non-zero with file:line on any error, and
    /// while any kind is disabled by an approver missing from the keyring.
    Check {
        #[command(flatten)]
        rules: Rules,
        /// Agents file to validate too.
        #[arg(long)]
        agents: Option<PathBuf>,
    },
    /// The audit log: from the store (server stopped) or from a running server (--server).
    Audit {
        #[command(subcommand)]
        action: AuditAction,
    },
    /// Agent tokens.
    Agent {
        #[command(subcommand)]
        action: AgentAction,
    },
    /// Write one commented policy per tool of a downstream MCP server (kind
    /// `<prefix>.<tool>`, an `mcp` executor; approvers and quorum to fill in). Never
    /// overwrites a file.
    ImportTools {
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
    },
}

/// Where the audit log is read from.
#[derive(clap::Args, Clone)]
struct AuditFrom {
    /// Store folder (read directly: the server must be stopped).
    #[arg(long, default_value = "./data", conflicts_with = "server")]
    data: PathBuf,
    /// A PostgreSQL store, read directly (instances may keep running):
    /// postgres://USER[:PASSWORD]@HOST:PORT/DATABASE, or sled:DIR like --data.
    #[arg(long, value_name = "STORE", conflicts_with = "server")]
    store: Option<run::StoreSpec>,
    /// A running server's approver API, e.g. http://127.0.0.1:4800 (signed read of
    /// /v1/audit; needs --key). The chain is checked here, as offline.
    #[arg(long, value_name = "URL", requires = "key")]
    server: Option<String>,
    /// Secret key file of an approver in the server's keyring (signer-cli keygen).
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
}

#[derive(Subcommand)]
enum AuditAction {
    /// Check the hash chain: any edit, reorder or gap fails.
    Verify {
        #[command(flatten)]
        from: AuditFrom,
    },
    /// Write every entry as one JSON line on stdout.
    Export {
        #[command(flatten)]
        from: AuditFrom,
    },
}

#[derive(Subcommand)]
enum AgentAction {
    /// Make a token for a new agent: printed once, only its hash is kept.
    Add {
        /// The agent's name (becomes `requested_by`).
        name: String,
        /// Agents file to append to (created with mode 0600).
        #[arg(long, default_value = "./agents")]
        agents: PathBuf,
    },
}

/// Logs go to stderr (stdout carries the endpoint lines, or the protocol in stdio mode).
/// rmcp logs every stateless request at info; that is noise here, and costly under load.
fn logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{default},rmcp=warn")));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve {
            mut data,
            store,
            claim_lease,
            rules,
            agents,
            listen,
            approver_listen,
            allowed_host,
            allowed_origin,
            max_pending_per_agent,
            max_pending,
            notify,
        } => {
            logging("info");
            let notify = notify.options()?;
            let database = match store {
                Some(run::StoreSpec::Sled(dir)) => {
                    data = dir;
                    None
                }
                Some(run::StoreSpec::Postgres(url)) => Some(url),
                None => None,
            };
            let opts = ServeOptions {
                database,
                claim_lease: std::time::Duration::from_secs(claim_lease.max(1)),
                data,
                source: ConfigSource {
                    policies: rules.policies,
                    keys: rules.keys,
                    agents,
                    embedded_policies: None,
                },
                listen,
                approver_listen,
                allowed_hosts: allowed_host,
                allowed_origins: allowed_origin,
                demo_keys: None,
                limits: approval_server::store::PendingLimits {
                    per_agent: max_pending_per_agent,
                    total: max_pending,
                },
                notify,
            };
            let svc = run::start(&opts).await?;
            run::serve(opts, svc).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo {
            listen,
            policies,
            agents,
            data,
            keys_dir,
        } => {
            logging("info");
            let keys = demo::prepare_keys(&keys_dir)?;
            let opts = ServeOptions {
                data,
                source: demo::policy_source(policies, keys, agents)?,
                listen,
                approver_listen: None,
                allowed_hosts: vec![],
                allowed_origins: vec![],
                demo_keys: Some(keys_dir),
                limits: Default::default(),
                notify: Default::default(),
                database: None,
                claim_lease: approval_server::store::postgres::DEFAULT_LEASE,
            };
            let svc = run::start(&opts).await?;
            run::serve(opts, svc).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Stdio {
            connect,
            token,
            data,
            rules,
            agents,
            listen,
        } => {
            logging("warn");
            stdio::run(stdio::StdioOptions {
                connect,
                token,
                data,
                policies: rules.policies,
                keys: rules.keys,
                agents,
                listen,
            })
            .await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Init { dir } => {
            for o in init::scaffold(&dir)? {
                match o {
                    init::Outcome::Created(p) => println!("created {}", p.display()),
                    init::Outcome::Kept(p) => {
                        println!("kept {} (it exists; not overwritten)", p.display())
                    }
                }
            }
            println!("{}", init::next_steps(&dir));
            Ok(ExitCode::SUCCESS)
        }
        Command::ImportTools {
            out,
            prefix,
            url,
            command,
            timeout,
        } => {
            logging("warn");
            use approval_server::executor::mcp::Downstream;
            use approval_server::import_tools::{import, Imported};
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
            let done = import(
                &downstream,
                &out,
                &prefix,
                std::time::Duration::from_secs(timeout),
            )
            .await?;
            let mut wrote = 0;
            for d in &done {
                match d {
                    Imported::Wrote(p) => {
                        wrote += 1;
                        println!("wrote {}", p.display())
                    }
                    Imported::Kept(p) => {
                        println!("kept {} (exists; not overwritten)", p.display())
                    }
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
        Command::Migrate { store } => {
            if !approval_server::store::postgres::is_postgres_url(&store) {
                anyhow::bail!("migrate is for the PostgreSQL store: give --store postgres://USER@HOST:PORT/DATABASE (the embedded store needs no migration)");
            }
            let shown = approval_server::store::postgres::redact(&store);
            let (from, to) = tokio::task::spawn_blocking(move || PgStore::migrate(&store))
                .await?
                .with_context(|| format!("cannot migrate {shown}"))?;
            if from == to {
                println!("ok: {shown} is at schema version {to}; nothing to do");
            } else {
                println!("ok: {shown} migrated from schema version {from} to {to}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { rules, agents } => {
            let source = ConfigSource {
                policies: rules.policies.clone(),
                keys: rules.keys.clone(),
                agents,
                embedded_policies: None,
            };
            match approval_server::service::load_config(&source).await {
                Ok(c) => {
                    let kinds: Vec<String> = c
                        .policies
                        .iter()
                        .map(|p| {
                            format!(
                                "{} ({} of {})",
                                p.kind(),
                                p.spec().quorum,
                                p.spec().approvers.len()
                            )
                        })
                        .collect();
                    let disabled: Vec<_> = c.policies.disabled().collect();
                    if !disabled.is_empty() {
                        // The server would start with these kinds disabled; CI and
                        // operators must notice, so this is a failure.
                        for d in &disabled {
                            eprintln!("{}", d.to_error());
                            eprintln!("disabled: {}", d.reason());
                        }
                        eprintln!(
                            "{} kind(s) disabled: {}; {} enabled: {}",
                            disabled.len(),
                            disabled
                                .iter()
                                .map(|d| d.kind().to_string())
                                .collect::<Vec<_>>()
                                .join(", "),
                            kinds.len(),
                            kinds.join(", ")
                        );
                        return Ok(ExitCode::FAILURE);
                    }
                    println!(
                        "ok: {} approver(s) in {}; {} polic(ies) in {}: {}",
                        c.keyring.len(),
                        rules.keys.display(),
                        kinds.len(),
                        rules.policies.display(),
                        kinds.join(", ")
                    );
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("{}", source.explain(&e));
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        Command::Audit { action } => {
            let from = match &action {
                AuditAction::Verify { from } | AuditAction::Export { from } => from.clone(),
            };
            let (entries, head) = match (&from.server, &from.key, from.store.clone()) {
                (Some(url), Some(key), _) => audit_remote::fetch(url, key).await?,
                (_, _, Some(run::StoreSpec::Postgres(url))) => {
                    let shown = approval_server::store::postgres::redact(&url);
                    tokio::task::spawn_blocking(move || PgStore::open(&url).and_then(|s| s.audit()))
                        .await?
                        .with_context(|| format!("cannot read the audit log from {shown}"))?
                }
                (_, _, spec) => {
                    let data = match spec {
                        Some(run::StoreSpec::Sled(dir)) => dir,
                        _ => from.data,
                    };
                    let store = SledStore::open(&data.join("store")).with_context(|| {
                        format!(
                            "cannot open the store in {} (a running server locks it: stop it, or read the running server's log with --server URL --key FILE)",
                            data.display()
                        )
                    })?;
                    store.audit()?
                }
            };
            match action {
                AuditAction::Verify { .. } => match audit::verify_chain(entries, head) {
                    Ok(n) => {
                        println!(
                            "ok: {n} audit entries, chain intact{}",
                            head.map(|(_, h)| format!(", head {h}")).unwrap_or_default()
                        );
                        Ok(ExitCode::SUCCESS)
                    }
                    Err(e) => {
                        eprintln!("audit log broken: {e}");
                        Ok(ExitCode::FAILURE)
                    }
                },
                AuditAction::Export { .. } => {
                    use std::io::Write;
                    let mut out = std::io::stdout().lock();
                    for e in entries {
                        writeln!(out, "{}", serde_json::to_string(&e)?)?;
                    }
                    Ok(ExitCode::SUCCESS)
                }
            }
        }
        Command::Agent {
            action: AgentAction::Add { name, agents: path },
        } => {
            let name = approval_core::ids::AgentName::parse(&name)?;
            let existing = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
            };
            let parsed = agents::Agents::parse(&existing)
                .map_err(|(l, why)| anyhow::anyhow!("{}:{l}: {why}", path.display()))?;
            if parsed.contains(&name) {
                anyhow::bail!(
                    "agent {name} already exists in {}: pick another name",
                    path.display()
                );
            }
            let token = agents::new_token()?;
            let mut opts = std::fs::OpenOptions::new();
            opts.append(true).create(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                opts.mode(0o600);
            }
            let mut f = opts
                .open(&path)
                .with_context(|| format!("cannot write {}", path.display()))?;
            use std::io::Write;
            if !existing.is_empty() && !existing.ends_with('\n') {
                writeln!(f)?;
            }
            writeln!(f, "{}", agents::line(&name, &token))?;
            f.sync_all()?;
            println!("{token}");
            eprintln!("agent {name} added to {p}. The token above is shown once: give it to the agent (Authorization: Bearer <token> over HTTP, --token or APPROVAL_AGENT_TOKEN for `approval-server stdio`); the file keeps only its hash. Start the server (serve or demo) with --agents {p}, or send SIGHUP to one already started with it, to load it.", p = path.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}
