//! `approval-server serve` and `approval-server stdio`: the commands that start the
//! gate. Their flags become [`ServeOptions`] (or [`stdio::StdioOptions`]); the wiring
//! is `run`'s and `stdio`'s.

use super::shared::{logging, logging_as, LogFormat, Rules};
use crate::config::ConfigSource;
use crate::notify::NotifyOptions;
use crate::run::{self, ServeOptions};
use crate::stdio;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// The flags of `serve`.
#[derive(clap::Args)]
pub struct ServeArgs {
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
    /// Serve HTTPS (both listeners): the certificate chain, PEM, the server's own
    /// certificate first. Needs --tls-key. Re-read on SIGHUP.
    #[arg(long, value_name = "FILE", env = "APPROVAL_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert, PEM (PKCS#8, RSA or SEC1). Re-read on SIGHUP.
    #[arg(long, value_name = "FILE", env = "APPROVAL_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// Most PENDING proposals one agent may have; more are refused with LIMIT_EXCEEDED.
    #[arg(long, default_value_t = 10_000)]
    max_pending_per_agent: u64,
    /// Most PENDING proposals in all.
    #[arg(long, default_value_t = 1_000_000)]
    max_pending: u64,
    /// Where approvers open the gate's pages (the passkey approver page, enrolment
    /// links): scheme://host[:port], e.g. https://approvals.example.com. Default:
    /// http://localhost:<port> when the approver API listens on loopback.
    #[arg(long, value_name = "URL", env = "APPROVAL_PUBLIC_URL")]
    public_url: Option<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics, on a listener of its own
    /// (never on --listen or --approver-listen). Port 0 picks a free port; the
    /// address is printed as `Metrics: http://…/metrics`.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// Log lines on stderr: `text`, or `json` (one object a line, stable field names).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(flatten)]
    notify: NotifyArgs,
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
    #[arg(long, default_value_t = crate::notify::DEFAULT_OUTBOX_CAP)]
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
    fn options(self) -> anyhow::Result<NotifyOptions> {
        let mut o = NotifyOptions {
            smtp: self.smtp.filter(|s| !s.is_empty()),
            smtp_from: self.smtp_from,
            cap: self.notify_outbox_cap,
            ..Default::default()
        };
        if let Some(f) = &self.notify_default {
            o.default_channels = crate::notify::read_defaults(f)?;
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

/// `serve`: the service on its sockets until a signal stops it.
pub async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    logging_as("info", args.log_format);
    let ServeArgs {
        mut data,
        store,
        claim_lease,
        rules,
        agents,
        listen,
        approver_listen,
        allowed_host,
        allowed_origin,
        tls_cert,
        tls_key,
        max_pending_per_agent,
        max_pending,
        public_url,
        metrics_listen,
        log_format: _,
        notify,
    } = args;
    if let Some(u) = &public_url {
        check_public_url(u)?;
    }
    let tls = tls_files(tls_cert, tls_key)?;
    if let Some(files) = &tls {
        // Checked before the store is opened: a bad pair refuses the start at once.
        crate::tls::Tls::load(files.clone())?;
    }
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
            root: rules.root,
            embedded_policies: None,
        },
        listen,
        approver_listen,
        allowed_hosts: allowed_host,
        allowed_origins: allowed_origin,
        banner: None,
        limits: crate::store::PendingLimits {
            per_agent: max_pending_per_agent,
            total: max_pending,
        },
        notify,
        public_url,
        tls,
        metrics_listen,
    };
    let svc = run::start(&opts).await?;
    run::serve(opts, svc).await?;
    Ok(ExitCode::SUCCESS)
}

/// `--public-url` is an origin: `https://host[:port]`, or `http://localhost[:port]`.
fn check_public_url(u: &str) -> anyhow::Result<()> {
    let u = u.trim_end_matches('/');
    let ok = match u.split_once("://") {
        Some(("https", rest)) => !rest.is_empty() && !rest.contains('/'),
        Some(("http", rest)) => rest == "localhost" || rest.starts_with("localhost:"),
        _ => false,
    };
    if !ok {
        anyhow::bail!("--public-url {u:?}: give the origin approvers open, https://host[:port] (http only for localhost), nothing after it");
    }
    Ok(())
}

/// `--tls-cert` and `--tls-key` go together: one without the other is refused,
/// naming the missing flag, rather than silently serving plain HTTP.
fn tls_files(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> anyhow::Result<Option<crate::tls::TlsFiles>> {
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(crate::tls::TlsFiles { cert, key })),
        (None, None) => Ok(None),
        (Some(cert), None) => anyhow::bail!(
            "--tls-cert {} needs --tls-key FILE (or APPROVAL_TLS_KEY), the certificate's private key as PEM",
            cert.display()
        ),
        (None, Some(key)) => anyhow::bail!(
            "--tls-key {} needs --tls-cert FILE (or APPROVAL_TLS_CERT), the certificate chain as PEM",
            key.display()
        ),
    }
}

/// The flags of `stdio`.
#[derive(clap::Args)]
pub struct StdioArgs {
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
}

/// `stdio`: MCP over stdin/stdout, the gate here or joined or bridged.
pub async fn stdio(args: StdioArgs) -> anyhow::Result<ExitCode> {
    logging("warn");
    stdio::run(stdio::StdioOptions {
        connect: args.connect,
        token: args.token,
        data: args.data,
        policies: args.rules.policies,
        keys: args.rules.keys,
        root: args.rules.root,
        agents: args.agents,
        listen: args.listen,
    })
    .await?;
    Ok(ExitCode::SUCCESS)
}
