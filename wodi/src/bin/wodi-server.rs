//! The WoDi server as a binary of its own, for masters that name it with
//! `ServerCommand::Path` instead of re-executing themselves.

fn main() {
    wodi::enter();
    eprintln!("wodi-server: started without WODI_ROLE=server; the master library starts it");
    std::process::exit(2);
}
