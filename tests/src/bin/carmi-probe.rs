//! A CARMI application for the job-credential test (`tests/tests/jobcred.rs`):
//! started by a local RM, it reports what its job gave it (its secret file,
//! environment, sandbox files) and what it could not do with it (attach to
//! another job, open a direct connection to another job's process, open
//! its local RM's control connection), as one
//! JSON message to the process named by its first argument.
//!
//! Arguments: `REPORT_TO OTHER_JOB OTHER_ENDPOINT` (a process id of its own
//! job, a job id, and that job's process's `host:port`).

use carmi_api::client::{ConnectOptions, connect};
use carmi_api::frame::FrameReader;
use carmi_api::handshake;
use carmi_api::ids::{JobId, ProcessId};
use carmi_api::msg::Role;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [report_to, other_job, other_endpoint] = &args[..] else {
        eprintln!("carmi-probe: REPORT_TO OTHER_JOB OTHER_ENDPOINT");
        std::process::exit(2);
    };
    let report_to: ProcessId = report_to.parse().expect("a process id");
    let other_job: JobId = other_job.parse().expect("a job id");
    let opts = ConnectOptions::from_env().expect("options from the environment");
    let (carmi, _events) = connect(opts.clone())
        .await
        .expect("connect with the job's credential");

    let secret_file = std::env::var("CARMI_SECRET_FILE").unwrap_or_default();
    let secret_text = std::fs::read_to_string(&secret_file).unwrap_or_default();
    let env: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
    let mut sandbox = Vec::new();
    for entry in std::fs::read_dir(".").expect("the sandbox").flatten() {
        let text = std::fs::read(entry.path()).unwrap_or_default();
        sandbox.push(format!(
            "{}: {}",
            entry.file_name().to_string_lossy(),
            String::from_utf8_lossy(&text)
        ));
    }
    let mut as_other = opts.clone();
    as_other.job = Some(other_job);
    as_other.process = None;
    let as_other_job = match connect(as_other).await {
        Ok(_) => "attached".to_string(),
        Err(e) => format!("refused: {e}"),
    };
    let mut as_new = opts.clone();
    as_new.job = None;
    as_new.process = None;
    let as_new_job = match connect(as_new).await {
        Ok(_) => "attached".to_string(),
        Err(e) => format!("refused: {e}"),
    };
    // The local RM's control connection (owner presence): not a job's.
    let control = match carmi_api::control::OwnerLink::connect(&opts.local, &opts.secret).await {
        Ok(_) => "welcome".to_string(),
        Err(e) => format!("refused: {e}"),
    };
    let peer = |job| Role::Peer {
        from: carmi.process(),
        job,
    };
    let peer_as_other = direct(other_endpoint, &opts.secret, peer(other_job)).await;
    let peer_as_own = direct(other_endpoint, &opts.secret, peer(carmi.job())).await;
    let report = serde_json::json!({
        "secret_file": secret_file,
        "secret_text": secret_text,
        "env": env,
        "sandbox": sandbox,
        "as_other_job": as_other_job,
        "as_new_job": as_new_job,
        "peer_as_other_job": peer_as_other,
        "peer_as_own_job": peer_as_own,
        "control": control,
    });
    carmi.send(report_to, 1, serde_json::to_vec(&report).expect("json"));
    carmi.flush().await;
}

/// Opens a direct connection to `endpoint` as `role`: what its handshake said.
async fn direct(endpoint: &str, secret: &handshake::Secret, role: Role) -> String {
    let tcp = match tokio::net::TcpStream::connect(endpoint).await {
        Ok(t) => t,
        Err(e) => return format!("unreachable: {e}"),
    };
    // A job's processes take TLS only, the handshake bound to the session.
    let s = match carmi_api::tls::connect(tcp).await {
        Ok(s) => s,
        Err(e) => return format!("TLS: {e}"),
    };
    let (mut r, mut w) = (FrameReader::new(s.reader), s.writer);
    match handshake::client_bound(&mut r, &mut w, secret, &role, &s.binding).await {
        Ok(()) => "welcome".to_string(),
        Err(e) => format!("refused: {e}"),
    }
}
