//! `toolmesh`: the command line for agents and the people who build them.
//!
//! ```text
//! toolmesh tools list [--tag T] [--prefix P]      the live tools, a table
//! toolmesh tools get NAME                         one tool, its schemas
//! toolmesh search "what to do"                    the tools for a task
//! toolmesh invoke NAME '{"k": 1}' [--arg k=v]     call a tool
//! toolmesh invoke NAME ... --task [--detach]      call it as a task, wait for it
//! toolmesh tasks list|get|wait|cancel             the tasks: calls that outlive one request
//! toolmesh approvals list|watch|get               the calls held for your decision
//! toolmesh approvals approve|deny ID              decide one, once
//! toolmesh export --format anthropic              tools for an LLM API
//! toolmesh watch [--once]                         changes as they happen
//! toolmesh check sidecar.yaml                     a sidecar config, offline
//! toolmesh completions bash                       shell completions
//! ```
//!
//! Every command takes `--output json`; exit codes tell failures apart
//! ([`failure::Exit`]). The commands that ask the registry check first that
//! it is ready (its gRPC health), so that a registry still loading its
//! catalog is not taken for an empty one. A closed standard output ends any
//! command quietly with status 141, as `ls | head` does.
//!
//! # Layout
//! - `connect`: the registry's address, TLS, credential, deadlines, health.
//! - `commands`: the tools commands, `search`, `export`, `watch`, `invoke`.
//! - `tasks`: `invoke --task` and `tasks ...` (its folder: showing a task,
//!   following it to its end, the progress line).
//! - `approvals`: `approvals ...` (its folder: the `Approvals` client,
//!   showing an approval).
//! - `pins`: `pins ...`, pinned definitions and those held in quarantine.
//! - `arguments`: `invoke`'s arguments, `--arg` typed by the schema.
//! - `check`: a sidecar config, offline.
//! - `output`, `failure`, `pipe`: what is printed, how a failure ends, a
//!   reader gone from standard output.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};
use toolmesh_proto::pb::ExportFormat;

mod approvals;
mod arguments;
mod check;
mod commands;
mod connect;
mod failure;
mod output;
mod pins;
mod pipe;
mod tasks;

use approvals::Approvals;
use connect::{Registry, Target};
use failure::{Exit, Failure};
use output::Output;

#[derive(Debug, Parser)]
#[command(
    name = "toolmesh",
    version,
    about = "List, search, export, invoke and watch the tools of a toolmesh registry, run calls as tasks, decide the calls held for approval; check a sidecar config offline."
)]
struct Cli {
    #[command(flatten)]
    target: Target,
    /// `text` for people, `json` for scripts (errors too, on stdout).
    #[arg(long, short, value_enum, default_value_t = Output::Text, global = true)]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List tools, or show one.
    #[command(subcommand)]
    Tools(ToolsCommand),
    /// Call a tool: arguments as a JSON object and/or `--arg key=value` pairs (typed by the tool's schema).
    Invoke {
        /// The tool.
        name: String,
        /// The arguments, a JSON object (default `{}`).
        json: Option<String>,
        /// One argument, `key=value`; the value is typed by the tool's input schema. Repeatable.
        #[arg(long = "arg", short = 'a', value_name = "KEY=VALUE")]
        args: Vec<String>,
        /// Deduplicates: a repeat with the same key gets the first call's result (with `--task`, the first call's task).
        #[arg(long)]
        idempotency_key: Option<String>,
        /// Call only the definition with this digest (`tools get` shows it): refused, naming what changed, if the tool's live definition differs.
        #[arg(long)]
        digest: Option<String>,
        /// Run the call as a task, which outlives this command's connection, and wait for it as `tasks wait` does; `--timeout` bounds the wait (default: until it ends).
        #[arg(long)]
        task: bool,
        /// With `--task`: print the task's id and state and return at once.
        #[arg(long, short, requires = "task")]
        detach: bool,
    },
    /// Calls that outlive one request: list, show, wait for and cancel tasks.
    #[command(subcommand)]
    Tasks(TasksCommand),
    /// Calls the registry's policy holds for a person: list, watch, show, approve and deny them.
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// Pinned tool definitions (the registry's --pins-file): list them and those held in quarantine, show how a held one differs, approve or revoke a pin.
    #[command(subcommand)]
    Pins(PinsCommand),
    /// Find the tools most relevant to a task described in words.
    Search {
        /// The task, e.g. "will it rain in Paris tomorrow".
        query: String,
        /// Most tools shown.
        #[arg(long, short = 'n', default_value_t = 5)]
        limit: u32,
        /// Only tools with this tag (repeatable: all of them).
        #[arg(long = "tag")]
        tags: Vec<String>,
        /// Only tools whose name starts with this.
        #[arg(long, default_value = "")]
        prefix: String,
    },
    /// Print the tools as an LLM API takes them in its `tools` parameter.
    Export {
        /// The API's format.
        #[arg(long, short, value_enum)]
        format: Format,
        /// Only tools with this tag (repeatable: all of them).
        #[arg(long = "tag")]
        tags: Vec<String>,
        /// Only tools whose name starts with this.
        #[arg(long, default_value = "")]
        prefix: String,
        /// Only these tools, in this order (repeatable).
        #[arg(long = "name")]
        names: Vec<String>,
    },
    /// Print the current tools, then every change as it happens.
    Watch {
        /// Stop once the current tools are printed.
        #[arg(long)]
        once: bool,
    },
    /// Check a sidecar config file offline, with the sidecar's own checks.
    Check {
        /// The sidecar YAML.
        config: PathBuf,
    },
    /// Print a shell completion script, e.g. `toolmesh completions bash > /etc/bash_completion.d/toolmesh`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Subcommand)]
enum ToolsCommand {
    /// The live tools: name, instances, rate limit, description.
    List {
        /// Only tools with this tag (repeatable: all of them).
        #[arg(long = "tag")]
        tags: Vec<String>,
        /// Only tools whose name starts with this.
        #[arg(long, default_value = "")]
        prefix: String,
    },
    /// One tool: its descriptor and schemas.
    Get {
        /// The tool.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
enum TasksCommand {
    /// Your tasks, newest first: id, tool, state, progress, age.
    List {
        /// Most tasks in one page (1 to 500; default the registry's, 50).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=500))]
        page_size: Option<u32>,
        /// The page after the one that gave this token.
        #[arg(long, conflicts_with = "all_pages")]
        page_token: Option<String>,
        /// Every page, not just the first.
        #[arg(long)]
        all_pages: bool,
    },
    /// One task: its state, progress, times, and how it ended.
    Get {
        /// The task's id.
        id: String,
    },
    /// Wait for a task to end, then print its result as `invoke` does (and exit as it would); `--timeout` bounds the wait (default: until it ends).
    Wait {
        /// The task's id.
        id: String,
    },
    /// Cancel a task: it ends CANCELLED and its tool is stopped; one already over stays as it ended.
    Cancel {
        /// The task's id.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
enum PinsCommand {
    /// Every pin (tool, digest, mode, who pinned it) and every definition held in quarantine.
    List,
    /// How the held definition of a tool differs from its pinned one, field by field.
    Diff {
        /// The tool: `name@version`, or the name if unversioned.
        tool: String,
    },
    /// Pin a tool's definition: the held one (served from then on, on every replica), or the one of `--digest`.
    Approve {
        /// The tool: `name@version`, or the name if unversioned.
        tool: String,
        /// The digest approved (as `pins list` or `tools get` shows it); default: the held definition's.
        #[arg(long, value_name = "HEX")]
        digest: Option<String>,
    },
    /// Remove a pin made at run time (the pins file's stay); under `enforce` the tool is held until pinned again.
    Revoke {
        /// The tool: `name@version`, or the name if unversioned.
        tool: String,
    },
}

#[derive(Debug, Subcommand)]
enum ApprovalsCommand {
    /// The pending approvals you may decide, newest first: id, tool, caller, rule, expiry, arguments (as the registry shows them: redacted unless the rule reveals them).
    List {
        /// Most approvals shown [default: all].
        #[arg(long, short = 'n', value_parser = clap::value_parser!(u32).range(1..))]
        limit: Option<u32>,
    },
    /// Print the pending approvals you may decide (ADDED, then SYNCED), then each new one (ADDED) and each decided, expired or cancelled (REMOVED, with its state), until interrupted or `--timeout` (which ends it with status 0).
    Watch,
    /// One approval, pending or closed: every field, its digest and its arguments.
    Get {
        /// The approval's id (its task's).
        id: String,
    },
    /// Approve a pending call: it runs once, with the arguments it was held with.
    Approve {
        /// The approval's id (its task's).
        id: String,
        /// Why, in words (at most 2048 bytes are kept).
        #[arg(long)]
        comment: Option<String>,
        /// Approve only the call of this digest (as `approvals get` shows it): refused if the call is another.
        #[arg(long, value_name = "HEX", value_parser = approvals::digest)]
        digest: Option<String>,
    },
    /// Deny a pending call: its task fails PERMISSION_DENIED with your comment, which its caller reads.
    Deny {
        /// The approval's id (its task's).
        id: String,
        /// Why, in words: what the caller (and its LLM) reads (at most 2048 bytes are kept).
        #[arg(long, value_parser = approvals::reason)]
        comment: String,
        /// Deny only the call of this digest (as `approvals get` shows it): refused if the call is another.
        #[arg(long, value_name = "HEX", value_parser = approvals::digest)]
        digest: Option<String>,
    },
}

/// `export --format`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Format {
    /// OpenAI Chat Completions.
    OpenaiChat,
    /// OpenAI Responses.
    OpenaiResponses,
    /// Anthropic Messages.
    Anthropic,
    /// Gemini.
    Gemini,
    /// MCP tools/list.
    Mcp,
}

impl From<Format> for ExportFormat {
    fn from(format: Format) -> Self {
        match format {
            Format::OpenaiChat => Self::OpenaiChat,
            Format::OpenaiResponses => Self::OpenaiResponses,
            Format::Anthropic => Self::Anthropic,
            Format::Gemini => Self::Gemini,
            Format::Mcp => Self::Mcp,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let output = cli.output;
    let outcome = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(error) => Err(Failure::plain(
            Exit::Other,
            format!("cannot start: {error}"),
        )),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            report(&failure, output);
            ExitCode::from(failure.exit as u8)
        }
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let output = cli.output;
    // A wait's own limit: none unless `--timeout` says.
    let limit = cli.target.timeout;
    let connect = async || {
        let mut registry = Registry::connect(&cli.target)
            .await
            .map_err(|e| Failure::plain(Exit::Usage, format!("{e:#}")))?;
        registry.ready().await?;
        Ok::<_, Failure>(registry)
    };
    match cli.command {
        Command::Check { config } => check::check(&config, output),
        Command::Completions { shell } => {
            // Written whole, then printed: clap_complete panics on a
            // failed write.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "toolmesh", &mut script);
            let script = String::from_utf8_lossy(&script);
            output::print(script.strip_suffix('\n').unwrap_or(&script))
        }
        Command::Tools(ToolsCommand::List { tags, prefix }) => {
            commands::list(&mut connect().await?, tags, prefix, output).await
        }
        Command::Tools(ToolsCommand::Get { name }) => {
            commands::get(&mut connect().await?, name, output).await
        }
        Command::Search {
            query,
            limit,
            tags,
            prefix,
        } => commands::search(&mut connect().await?, query, limit, tags, prefix, output).await,
        Command::Export {
            format,
            tags,
            prefix,
            names,
        } => {
            commands::export(
                &mut connect().await?,
                format.into(),
                tags,
                prefix,
                names,
                output,
            )
            .await
        }
        Command::Watch { once } => commands::watch(&mut connect().await?, once, output).await,
        Command::Invoke {
            name,
            json,
            args,
            idempotency_key,
            digest,
            task,
            detach,
        } => {
            let mut registry = connect().await?;
            let mut call =
                commands::invoke_request(&mut registry, name, json, args, idempotency_key).await?;
            call.tool_digest = digest.unwrap_or_default();
            if task {
                tasks::start(&mut registry, call, detach, limit, output).await
            } else {
                commands::invoke(&mut registry, call, output).await
            }
        }
        Command::Tasks(TasksCommand::List {
            page_size,
            page_token,
            all_pages,
        }) => {
            tasks::list(
                &mut connect().await?,
                page_size,
                page_token,
                all_pages,
                output,
            )
            .await
        }
        Command::Tasks(TasksCommand::Get { id }) => {
            tasks::get(&mut connect().await?, id, output).await
        }
        Command::Tasks(TasksCommand::Wait { id }) => {
            tasks::wait(&mut connect().await?, id, limit, output).await
        }
        Command::Tasks(TasksCommand::Cancel { id }) => {
            tasks::cancel(&mut connect().await?, id, output).await
        }
        Command::Pins(command) => {
            let pins = &mut pins::Pins::new(connect().await?, &cli.target)?;
            match command {
                PinsCommand::List => pins::list(pins, output).await,
                PinsCommand::Diff { tool } => pins::diff(pins, tool, output).await,
                PinsCommand::Approve { tool, digest } => {
                    pins::approve(pins, tool, digest, output).await
                }
                PinsCommand::Revoke { tool } => pins::revoke(pins, tool, output).await,
            }
        }
        Command::Approvals(command) => {
            let approvals = &mut Approvals::new(connect().await?, &cli.target)?;
            match command {
                ApprovalsCommand::List { limit: most } => {
                    approvals::list(approvals, most, output).await
                }
                ApprovalsCommand::Watch => approvals::watch(approvals, limit, output).await,
                ApprovalsCommand::Get { id } => approvals::get(approvals, id, output).await,
                ApprovalsCommand::Approve {
                    id,
                    comment,
                    digest,
                } => approvals::approve(approvals, id, comment, digest, output).await,
                ApprovalsCommand::Deny {
                    id,
                    comment,
                    digest,
                } => approvals::deny(approvals, id, comment, digest, output).await,
            }
        }
    }
}

/// Prints `failure`: to stderr for people, as JSON on stdout for scripts;
/// nothing when stdout's reader has gone.
fn report(failure: &Failure, output: Output) {
    if failure.exit == Exit::BrokenPipe {
        return;
    }
    match output {
        Output::Json if !failure.json.is_null() => {
            let _ = output::print(&failure.json);
        }
        Output::Json => output::note(format_args!("error: {}", failure.message)),
        Output::Text => {
            output::note(format_args!("error: {}", failure.message));
            for line in &failure.details {
                output::note(format_args!("  {line}"));
            }
        }
    }
}
