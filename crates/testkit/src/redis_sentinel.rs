//! A local Redis Sentinel set-up for failover tests: a primary, replicas
//! (`--replicaof`) and Sentinels (`redis-server sentinel.conf --sentinel`),
//! all spawned `redis-server` processes on free loopback ports in one
//! temporary directory, stopped when the [`TestSentinel`] is dropped.
//!
//! The Sentinels monitor the primary as [`MASTER`] with a quorum of 2, a
//! primary counted down after 1 s of silence and a 5 s failover timeout, so
//! a killed primary is replaced within a few seconds.
//! [`TestSentinel::spawn`] returns once every Sentinel knows the replicas
//! and the other Sentinels (without that, no failover can be agreed on).

use std::{
    io::{BufRead, BufReader, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, Command},
    time::{Duration, Instant},
};

use crate::redis::{free_port, redis_server_binary};

/// The name the Sentinels monitor the primary by.
pub const MASTER: &str = "presa-test";

/// One spawned process, its port and its directory.
#[derive(Debug)]
struct Node {
    port: u16,
    child: Option<Child>,
    dir: PathBuf,
}

impl Node {
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A primary, its replicas and the Sentinels watching them.
#[derive(Debug)]
pub struct TestSentinel {
    /// Data nodes: the first is the primary at start.
    data: Vec<Node>,
    sentinels: Vec<Node>,
    /// `requirepass` of the data nodes (also their `masterauth`, and the
    /// Sentinels' `auth-pass`).
    data_password: Option<String>,
    /// `requirepass` of the Sentinels.
    sentinel_password: Option<String>,
    _dir: tempfile::TempDir,
}

impl TestSentinel {
    /// A primary with `replicas` replicas and `sentinels` Sentinels (at
    /// least 2, the quorum), ready to fail over.
    pub fn spawn(replicas: usize, sentinels: usize) -> TestSentinel {
        Self::spawn_with_passwords(replicas, sentinels, None, None)
    }

    /// The same with passwords: `data` for the primary and replicas
    /// (`requirepass`, `masterauth`), `sentinel` for the Sentinels.
    pub fn spawn_with_passwords(
        replicas: usize,
        sentinels: usize,
        data: Option<&str>,
        sentinel: Option<&str>,
    ) -> TestSentinel {
        assert!(sentinels >= 2, "the quorum is 2");
        let dir = tempfile::tempdir().expect("temp dir");
        let mut data_nodes = Vec::new();
        let primary = free_port();
        for i in 0..=replicas {
            let node_dir = dir.path().join(format!("data{i}"));
            std::fs::create_dir_all(&node_dir).expect("node dir");
            let port = if i == 0 { primary } else { free_port() };
            let child = spawn_data_node(&node_dir, port, (i > 0).then_some(primary), data)
                .unwrap_or_else(|e| panic!("data node {i}: {e}"));
            data_nodes.push(Node { port, child: Some(child), dir: node_dir });
        }
        let mut nodes = Vec::new();
        for i in 0..sentinels {
            let port = free_port();
            let child = spawn_sentinel(dir.path(), i, port, primary, data, sentinel)
                .unwrap_or_else(|e| panic!("sentinel {i}: {e}"));
            nodes.push(Node { port, child: Some(child), dir: dir.path().to_path_buf() });
        }
        let setup = TestSentinel {
            data: data_nodes,
            sentinels: nodes,
            data_password: data.map(str::to_string),
            sentinel_password: sentinel.map(str::to_string),
            _dir: dir,
        };
        setup.wait_until_watched(replicas, Duration::from_secs(30));
        eprintln!(
            "[testkit] redis source: spawned Sentinel set-up (primary 127.0.0.1:{primary}, {replicas} replica(s), sentinels {})",
            setup.sentinel_addresses()
        );
        setup
    }

    /// The Sentinels as `host:port,host:port…` (for `--redis-sentinels`).
    pub fn sentinel_addresses(&self) -> String {
        self.sentinels.iter().map(|s| format!("127.0.0.1:{}", s.port)).collect::<Vec<_>>().join(",")
    }

    /// The port of the data node `i` (0: the primary at start).
    pub fn data_port(&self, i: usize) -> u16 {
        self.data[i].port
    }

    /// The primary's port as the first Sentinel that answers names it.
    pub fn primary_port(&self) -> Option<u16> {
        self.sentinels.iter().filter(|s| s.child.is_some()).find_map(|s| {
            let reply = self.ask_sentinel(s.port, &["SENTINEL", "get-master-addr-by-name", MASTER]).ok()?;
            reply.get(1)?.parse().ok()
        })
    }

    /// SIGKILL the data node on `port` (the primary, to force a failover).
    pub fn kill_data_node(&mut self, port: u16) {
        let node = self.data.iter_mut().find(|n| n.port == port).expect("a data node on that port");
        node.kill();
    }

    /// Start the killed data node on `port` again, empty (no persistence),
    /// as a replica of the primary on `primary`; returns once it is in sync.
    /// The Sentinels find it there and count it among the replicas again.
    pub fn restart_data_node(&mut self, port: u16, primary: u16) -> Result<(), String> {
        let data = self.data_password.clone();
        let node = self.data.iter_mut().find(|n| n.port == port).expect("a data node on that port");
        assert!(node.child.is_none(), "data node {port} is running");
        node.child = Some(spawn_data_node(&node.dir, port, Some(primary), data.as_deref())?);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.ask_data(port, &["INFO", "replication"]).is_ok_and(|r| {
            r.iter()
                .any(|text| text.contains("master_link_status:up") && text.contains(&format!("master_port:{primary}")))
        }) {
            if Instant::now() > deadline {
                return Err(format!("restarted data node {port} did not sync with {primary} within 30 s"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Ask a Sentinel for a failover while the primary is up (`SENTINEL
    /// FAILOVER`): the primary is turned into a replica of a promoted one.
    pub fn force_failover(&self) {
        let s = self.sentinels.iter().find(|s| s.child.is_some()).expect("a running Sentinel");
        let reply = self.ask_sentinel(s.port, &["SENTINEL", "FAILOVER", MASTER]);
        assert_eq!(reply, Ok(vec!["OK".to_string()]), "SENTINEL FAILOVER");
    }

    /// Wait until every Sentinel still running names a primary other than
    /// `old` that answers `ROLE` as master; returns its port.
    pub fn wait_for_failover(&self, old: u16, timeout: Duration) -> Result<u16, String> {
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        while Instant::now() < deadline {
            let named: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .filter(|s| s.child.is_some())
                .map(|s| {
                    let reply = self.ask_sentinel(s.port, &["SENTINEL", "get-master-addr-by-name", MASTER]).ok()?;
                    reply.get(1)?.parse().ok()
                })
                .collect();
            if let Some(Some(new)) = named.first()
                && *new != old
                && named.iter().all(|n| *n == Some(*new))
                && self.ask_data(*new, &["ROLE"]).is_ok_and(|r| r.first().is_some_and(|role| role == "master"))
            {
                return Ok(*new);
            }
            last = format!("{named:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!("no failover from port {old} within {timeout:?}; the Sentinels name {last}"))
    }

    /// Run a command on the data node on `port` (with its password); the
    /// reply flattened into strings.
    pub fn ask_data(&self, port: u16, args: &[&str]) -> Result<Vec<String>, String> {
        command(port, self.data_password.as_deref(), args)
    }

    fn ask_sentinel(&self, port: u16, args: &[&str]) -> Result<Vec<String>, String> {
        command(port, self.sentinel_password.as_deref(), args)
    }

    fn wait_until_watched(&self, replicas: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let others = self.sentinels.len() - 1;
        loop {
            let ready = self.sentinels.iter().all(|s| {
                let Ok(fields) = self.ask_sentinel(s.port, &["SENTINEL", "master", MASTER]) else { return false };
                let field = |name: &str| {
                    fields.chunks(2).find(|kv| kv[0] == name).and_then(|kv| kv.get(1)).and_then(|v| v.parse().ok())
                };
                field("num-slaves") == Some(replicas) && field("num-other-sentinels") == Some(others)
            }) && self.data[1..].iter().all(|n| {
                self.ask_data(n.port, &["INFO", "replication"])
                    .is_ok_and(|r| r.iter().any(|text| text.contains("master_link_status:up")))
            });
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the Sentinels did not see every replica and each other within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for TestSentinel {
    fn drop(&mut self) {
        for n in self.sentinels.iter_mut().chain(self.data.iter_mut()) {
            n.kill();
        }
    }
}

/// Start a data node on `port` in `dir`: a replica of `replica_of` when
/// given, else a primary; `password` its `requirepass` and `masterauth`.
fn spawn_data_node(dir: &Path, port: u16, replica_of: Option<u16>, password: Option<&str>) -> Result<Child, String> {
    let mut args: Vec<String> =
        ["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
            .map(str::to_string)
            .to_vec();
    args.extend(["--dir".to_string(), dir.to_string_lossy().into_owned()]);
    if let Some(primary) = replica_of {
        args.extend(["--replicaof".to_string(), "127.0.0.1".to_string(), primary.to_string()]);
    }
    if let Some(pw) = password {
        args.extend(["--requirepass", pw, "--masterauth", pw].map(str::to_string));
    }
    spawn_node(dir, &args, port, password)
}

/// Start Sentinel `i` on `port`, monitoring the primary on `primary`.
fn spawn_sentinel(
    dir: &Path,
    i: usize,
    port: u16,
    primary: u16,
    data: Option<&str>,
    sentinel: Option<&str>,
) -> Result<Child, String> {
    let conf = dir.join(format!("sentinel{i}.conf"));
    let mut text = format!(
        "port {port}\nbind 127.0.0.1\ndir {}\n\
         sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
         sentinel down-after-milliseconds {MASTER} 1000\n\
         sentinel failover-timeout {MASTER} 5000\n\
         sentinel parallel-syncs {MASTER} 1\n",
        dir.display()
    );
    if let Some(pw) = data {
        text.push_str(&format!("sentinel auth-pass {MASTER} {pw}\n"));
    }
    if let Some(pw) = sentinel {
        // Also what the Sentinels authenticate to each other with.
        text.push_str(&format!("requirepass {pw}\n"));
    }
    std::fs::write(&conf, text).map_err(|e| format!("write {}: {e}", conf.display()))?;
    let args = [conf.to_string_lossy().into_owned(), "--sentinel".to_string()];
    spawn_node(dir, &args, port, sentinel)
}

/// Start `redis-server args` in `dir` and wait until it answers PING on
/// `port` (after AUTH with `password`).
fn spawn_node(dir: &Path, args: &[String], port: u16, password: Option<&str>) -> Result<Child, String> {
    let mut node = Command::new(redis_server_binary());
    node.args(args).current_dir(dir);
    crate::redis::spawn_until(node, port, || command(port, password, &["PING"]).is_ok())
}

/// Run one command on `127.0.0.1:port` (after `AUTH password`, if given)
/// and flatten the reply into strings (nested arrays flattened).
fn command(port: u16, password: Option<&str>, args: &[&str]) -> Result<Vec<String>, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_millis(1000))).map_err(|e| e.to_string())?;
    let encode = |args: &[&str]| {
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        req
    };
    let mut req = String::new();
    if let Some(pw) = password {
        req.push_str(&encode(&["AUTH", pw]));
    }
    req.push_str(&encode(args));
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s);
    if password.is_some() {
        read_reply(&mut r, &mut Vec::new())?;
    }
    let mut out = Vec::new();
    read_reply(&mut r, &mut out)?;
    Ok(out)
}

fn read_line(r: &mut impl BufRead) -> Result<String, String> {
    let mut line = String::new();
    r.read_line(&mut line).map_err(|e| e.to_string())?;
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

fn read_reply(r: &mut impl BufRead, out: &mut Vec<String>) -> Result<(), String> {
    let line = read_line(r)?;
    let (kind, rest) = line.split_at(line.len().min(1));
    match kind {
        "+" | ":" => out.push(rest.to_string()),
        "-" => return Err(rest.to_string()),
        "$" => {
            let n: i64 = rest.parse().map_err(|_| format!("bad bulk length {rest}"))?;
            if n >= 0 {
                let mut buf = vec![0u8; n as usize + 2];
                std::io::Read::read_exact(r, &mut buf).map_err(|e| e.to_string())?;
                out.push(String::from_utf8_lossy(&buf[..n as usize]).into_owned());
            }
        }
        "*" => {
            let n: i64 = rest.parse().map_err(|_| format!("bad array length {rest}"))?;
            for _ in 0..n.max(0) {
                read_reply(r, out)?;
            }
        }
        _ => return Err(format!("unexpected reply {line:?}")),
    }
    Ok(())
}
