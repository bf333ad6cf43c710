//! The fake global RM answers real clients as the real one would: an admin
//! request through `carmi_api::admin`, over the real handshake and frames,
//! gets the test's answer, and a client with the wrong secret gets none.

use carmi_api::admin::{AdminError, pool_status};
use carmi_api::handshake::Secret;
use carmi_api::msg::{FromGlobal, ToGlobal};
use carmi_testkit::{FAKE_SECRET, FakeGlobal};

#[tokio::test]
async fn admins_get_the_tests_answer_and_a_wrong_secret_gets_nothing() {
    let global = FakeGlobal::new().await;
    let addr = global.addr();
    global.answer_admins(|msg| match msg {
        ToGlobal::Status => FromGlobal::Pool(Vec::new()),
        other => panic!("unexpected request {other:?}"),
    });
    let secret = Secret::new(FAKE_SECRET).expect("the kit's secret is usable");
    // Twice: the fake keeps serving after the first admin hangs up.
    for _ in 0..2 {
        let machines = pool_status(&addr, &secret).await.expect("an answer");
        assert!(machines.is_empty());
    }
    let wrong = Secret::new(b"another pool's secret, 0123456789").expect("usable");
    let err = pool_status(&addr, &wrong).await.unwrap_err();
    assert!(!matches!(err, AdminError::Unreachable { .. }), "{err:?}");
    // And it still serves the right secret after refusing the wrong one.
    assert!(
        pool_status(&addr, &secret)
            .await
            .expect("an answer")
            .is_empty()
    );
}
