//! Staging at the driver: the store served to local RMs that connect as
//! stagers (the staging messages go to the core as `node::Input::Stage`).

use std::net::SocketAddr;

use carmi_api::conn::{ConnReader, ConnWriter};
use carmi_api::frame::FrameReader;
use carmi_api::stage::{self, Served};
use carmi_api::tls;
use tracing::{debug, warn};

use super::{Cmd, Shared};
use crate::staging::StageInput;

/// A local RM fetching from the store: one executable, through the link limiter.
pub(super) async fn serve_stager(
    reader: FrameReader<tls::Reader>,
    w: tls::Writer,
    name: &str,
    peer: SocketAddr,
    shared: &Shared,
) {
    let (mut reader, mut w) = (ConnReader::from_frames(reader), ConnWriter::new(w));
    let store = shared.store.clone();
    let cmds = shared.cmds.clone();
    let lookup = async move |sha256: String| match store.open_file(&sha256) {
        Ok(Some((executable, file))) => {
            let _ = cmds.send(Cmd::Staging(StageInput::GlobalSend));
            Served::File { file, executable }
        }
        Ok(None) => Served::Missing("not in the global RM's store".into()),
        Err(e) => {
            warn!("staging {sha256}: {e}");
            Served::Missing(format!("the global RM cannot read it: {e}"))
        }
    };
    match stage::serve(&mut reader, &mut w, lookup, &shared.limiter).await {
        Ok(bytes) => debug!(%peer, machine = name, bytes, "executable staged from the store"),
        Err(e) => warn!(%peer, machine = name, "staging from the store ended: {e}"),
    }
    let _ = w.shutdown().await;
}
