//! A job for the isolation test (`tests/tests/isolation.rs`): it tries to
//! read each path it is given (a directory is listed, a file read) and
//! prints, one JSON object a line, what happened: `errno` 0 when it could,
//! else the error number (13 is EACCES). Its first line says which account
//! it runs as and where. Needs no pool connection: a plain process.

fn main() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let ids = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let me = serde_json::json!({
        "uid": ids("Uid:"),
        "gid": ids("Gid:"),
        "groups": ids("Groups:"),
        "cwd": std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default(),
        "user": std::env::var("USER").unwrap_or_default(),
    });
    println!("{me}");
    for path in std::env::args().skip(1) {
        let result = match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => std::fs::read_dir(&path).map(|_| ()),
            Ok(_) => std::fs::read(&path).map(|_| ()),
            Err(e) => Err(e),
        };
        let (errno, error) = match result {
            Ok(()) => (0, String::new()),
            Err(e) => (e.raw_os_error().unwrap_or(-1), e.to_string()),
        };
        println!(
            "{}",
            serde_json::json!({"path": path, "errno": errno, "error": error})
        );
    }
}
