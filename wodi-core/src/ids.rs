//! Newtype identifiers of WoDi, so that a step id is never taken for a worker id.
//!
//! Defined with CARMI's own macro ([`carmi_proto::id_type!`]): one wire form
//! (the bare number), one display (`s3`, `w7`, `c2`) and one parser for both
//! systems' ids.

carmi_proto::id_type!(
    /// A work step, named by the master; unique within a cycle (the same id
    /// in the next cycle is the same piece of work, which the history uses).
    StepId, "s"
);
carmi_proto::id_type!(
    /// A worker process, numbered by the server in spawn order.
    WorkerId, "w"
);
carmi_proto::id_type!(
    /// A cycle of the master's computation.
    CycleId, "c"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_keep_their_wire_and_text_forms() {
        assert_eq!(serde_json::to_string(&StepId(3)).unwrap(), "3");
        assert_eq!(serde_json::from_str::<WorkerId>("7").unwrap(), WorkerId(7));
        assert_eq!(CycleId(2).to_string(), "c2");
        assert_eq!("w7".parse::<WorkerId>(), Ok(WorkerId(7)));
        assert_eq!("3".parse::<StepId>(), Ok(StepId(3)));
        assert!("c2".parse::<StepId>().is_err());
    }
}
