//! Command-line and environment configuration shared by the binaries.
//!
//! [`load`] parses a clap `Parser` like `T::parse()` and adds two things:
//! `--print-config` prints every effective setting with where it came from
//! (flag, environment, default) and exits, with secrets redacted; and an
//! invalid value names both the flag and its environment variable, then
//! exits non-zero.

use clap::{
    Arg, ArgAction, ArgMatches, Command, FromArgMatches, Parser,
    error::{ContextKind, ContextValue, ErrorKind},
    parser::ValueSource,
};

/// Settings whose values are never printed. Every other value is printed
/// with the password of any URL in it redacted ([`redact_url`]).
const SECRETS: &[&str] =
    &["state_secret", "upstream_header", "upstream_env", "redis_password", "redis_sentinel_password"];

/// Parse `T` from the command line and the environment (see the module docs).
pub fn load<T: Parser>() -> T {
    load_from::<T>(T::command(), std::env::args_os())
}

/// [`load`] with the command (e.g. renamed after the binary) and the arguments given.
pub fn load_from<T: FromArgMatches>(
    cmd: Command,
    args: impl IntoIterator<Item = impl Into<std::ffi::OsString> + Clone>,
) -> T {
    let cmd = cmd.arg(
        Arg::new("print_config")
            .long("print-config")
            .action(ArgAction::SetTrue)
            .help("Print the effective configuration (secrets redacted) and exit"),
    );
    let matches = cmd.clone().try_get_matches_from(args).unwrap_or_else(|e| fail(e, &cmd));
    let args = T::from_arg_matches(&matches).unwrap_or_else(|e| fail(e, &cmd));
    if matches.get_flag("print_config") {
        print!("{}", render(&cmd, &matches));
        std::process::exit(0);
    }
    args
}

/// Exit with clap's message, naming the environment variable of the setting at fault.
fn fail(e: clap::Error, cmd: &Command) -> ! {
    let culprit = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    let env = culprit.as_deref().and_then(|flag| {
        cmd.get_arguments()
            .find(|a| flag.starts_with(&format!("--{}", a.get_long().unwrap_or("\u{0}"))))
            .and_then(|a| a.get_env())
            .map(|e| e.to_string_lossy().into_owned())
    });
    let invalid = matches!(e.kind(), ErrorKind::InvalidValue | ErrorKind::ValueValidation);
    match env {
        Some(env) if invalid => {
            let _ = e.print();
            eprintln!("invalid configuration: {} (flag) or {env} (environment)", culprit.unwrap_or_default());
            std::process::exit(2);
        }
        _ => e.exit(),
    }
}

/// `name = value  (--flag, ENV; source)` for every setting, secrets redacted.
pub fn render(cmd: &Command, matches: &ArgMatches) -> String {
    let mut out = String::new();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if matches!(id, "help" | "version" | "print_config") {
            continue;
        }
        let raw: Vec<String> = matches
            .get_raw(id)
            .map(|vals| vals.map(|v| v.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        let value = if raw.is_empty() {
            "<unset>".to_string()
        } else if SECRETS.contains(&id) {
            "<redacted>".to_string()
        } else {
            raw.iter().map(|v| redact_url(v)).collect::<Vec<_>>().join(",")
        };
        let source = match matches.value_source(id) {
            Some(ValueSource::CommandLine) => "flag",
            Some(ValueSource::EnvVariable) => "environment",
            Some(ValueSource::DefaultValue) => "default",
            _ => "unset",
        };
        let long = arg.get_long().map(|l| format!("--{l}")).unwrap_or_default();
        let env = arg.get_env().map(|e| format!(", {}", e.to_string_lossy())).unwrap_or_default();
        out.push_str(&format!("{id} = {value}  ({long}{env}; {source})\n"));
    }
    out
}

/// A URL with its password redacted (the one implementation, in presa-telemetry).
pub use presa_telemetry::redact_url;

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[derive(Debug, Parser)]
    struct Demo {
        #[arg(long, env = "DEMO_LISTEN", default_value = "127.0.0.1:1")]
        listen: std::net::SocketAddr,
        #[arg(long, env = "DEMO_SECRET")]
        state_secret: Option<String>,
        #[arg(long, env = "DEMO_URL")]
        redis_url: Option<String>,
        #[arg(long, env = "DEMO_JWKS_URL")]
        jwks_url: Option<String>,
        #[arg(long, env = "DEMO_REDIS_PASSWORD")]
        redis_password: Option<String>,
        #[arg(long, env = "DEMO_SENTINEL_PASSWORD")]
        redis_sentinel_password: Option<String>,
    }

    #[test]
    fn renders_sources_and_redacts() {
        let cmd = Demo::command();
        let m = cmd
            .clone()
            .try_get_matches_from([
                "demo",
                "--state-secret",
                "hunter2",
                "--redis-url",
                "redis://u:pw@h:6379/0",
                "--jwks-url",
                "https://svc:jwkspass@idp.example/jwks",
                "--redis-password",
                "datapass",
                "--redis-sentinel-password",
                "sentpass",
            ])
            .unwrap();
        let text = render(&cmd, &m);
        assert!(text.contains("listen = 127.0.0.1:1  (--listen, DEMO_LISTEN; default)"), "{text}");
        assert!(text.contains("state_secret = <redacted>  (--state-secret, DEMO_SECRET; flag)"), "{text}");
        assert!(text.contains("redis_url = redis://u:***@h:6379/0"), "{text}");
        assert!(text.contains("jwks_url = https://svc:***@idp.example/jwks"), "{text}");
        assert!(text.contains("redis_password = <redacted>") && text.contains("redis_sentinel_password = <redacted>"));
        assert!(!text.contains("hunter2") && !text.contains("pw@") && !text.contains("jwkspass"), "{text}");
        assert!(!text.contains("datapass") && !text.contains("sentpass"), "{text}");
    }
}
