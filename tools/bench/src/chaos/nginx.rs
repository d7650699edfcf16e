//! The nginx in front of the API pods: finding its binary, filling in the template, starting it.

use super::*;

/// The nginx configuration `deploy/local-cluster.sh` uses, filled in here.
const NGINX_TEMPLATE: &str = include_str!("../../../../deploy/nginx/presa.conf.template");

/// The nginx in front of the API pods, stopped when dropped (SIGTERM, so its worker process goes too).
pub(super) struct Nginx {
    pub(super) child: Child,
    pub(super) _dir: tempfile::TempDir,
    pub(super) url: String,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        presa_testkit::redis::signal(self.child.id(), "TERM");
        let _ = self.child.wait();
    }
}

/// The nginx binary to run, or why there is none.
pub(super) fn nginx_binary(args: &ChaosArgs) -> Result<PathBuf, String> {
    let nginx = args.nginx.clone().unwrap_or_else(|| {
        std::env::var_os("PATH")
            .and_then(|p| std::env::split_paths(&p).map(|d| d.join("nginx")).find(|p| p.is_file()))
            .unwrap_or_else(|| PathBuf::from("/usr/sbin/nginx"))
    });
    if nginx.is_file() {
        Ok(nginx)
    } else {
        Err(format!("{} not found: apt-get install nginx-light (or --nginx)", nginx.display()))
    }
}

pub(super) async fn start_nginx(nginx: &Path, rig: &Rig) -> Result<Nginx, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let port = free_port();
    let upstreams: String = rig.apis.iter().map(|(p, _)| format!("server 127.0.0.1:{p}; ")).collect();
    let conf = NGINX_TEMPLATE
        .replace("@PREFIX@", &dir.path().to_string_lossy())
        .replace("@LISTEN@", &format!("127.0.0.1:{port}"))
        .replace("@UPSTREAMS@", &upstreams)
        .replace("@AUTH_HEADER@", "");
    let conf_path = dir.path().join("nginx.conf");
    std::fs::write(&conf_path, conf).map_err(|e| e.to_string())?;
    let child = Command::new(nginx)
        .arg("-c")
        .arg(&conf_path)
        .arg("-p")
        .arg(dir.path())
        .arg("-e")
        .arg(dir.path().join("error.log"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", nginx.display()))?;
    let nginx = Nginx { child, _dir: dir, url: format!("http://127.0.0.1:{port}/mcp") };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(r) = reqwest::get(format!("http://127.0.0.1:{port}/readyz")).await
            && r.status().is_success()
        {
            return Ok(nginx);
        }
        if Instant::now() > deadline {
            return Err("nginx did not answer /readyz within 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
