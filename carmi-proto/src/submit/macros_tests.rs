use super::*;
use crate::submit::FixedEnv;

fn env() -> FixedEnv {
    let mut e = FixedEnv {
        now_unix: 1_796_237_869, // 2026-12-02
        ..FixedEnv::default()
    };
    e.vars.insert("HOME".into(), "/home/ann".into());
    e
}

fn expand(user: &[(&str, &str)], proc: Option<&ProcVars>, text: &str) -> Result<String, String> {
    let user: HashMap<String, String> = user
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
        .collect();
    let env = env();
    Scope {
        user: &user,
        proc,
        env: &env,
    }
    .expand(text)
}

#[test]
fn user_macros_expand_late_and_case_insensitively() {
    let user = [("dir", "/mnt/$(Who)"), ("who", "bob")];
    assert_eq!(expand(&user, None, "$(DIR)/x").unwrap(), "/mnt/bob/x");
    assert_eq!(
        expand(&user, None, "$(nope)|$(nope:dflt)|$(who:x)").unwrap(),
        "|dflt|bob"
    );
    // A macro naming itself expands to nothing, as in HTCondor.
    assert_eq!(expand(&[("x", "a$(x)")], None, "$(x)").unwrap(), "a");
}

#[test]
fn cluster_stays_proc_variables_expand_and_match_time_is_kept() {
    let p = ProcVars {
        proc_id: 4,
        step: 1,
        item_index: 2,
        vars: vec![("item".into(), "f.dat".into())],
    };
    assert_eq!(
        expand(
            &[],
            Some(&p),
            "$(Cluster).$(ProcId) $(Process) $(Step) $(ItemIndex) $(Row) $(Item)"
        )
        .unwrap(),
        "$(Cluster).4 4 1 2 2 f.dat"
    );
    assert_eq!(expand(&[], Some(&p), "$(JobId)").unwrap(), "$(ClusterId).4");
    assert_eq!(expand(&[], None, "$(ProcId)").unwrap(), "$(ProcId)");
    assert_eq!(
        expand(&[], Some(&p), "$$(Memory) $$([a + (b)])").unwrap(),
        "$$(Memory) $$([a + (b)])"
    );
    assert_eq!(
        expand(&[], None, "cost: 5$(DOLLAR) $x").unwrap(),
        "cost: 5$ $x"
    );
}

#[test]
fn environment_time_and_functions() {
    assert_eq!(
        expand(&[], None, "$ENV(HOME) $ENV(NOPE:none)").unwrap(),
        "/home/ann none"
    );
    assert_eq!(
        expand(&[], None, "$(Year)-$(Month)-$(Day) $(SUBMIT_TIME)").unwrap(),
        "2026-12-02 1796237869"
    );
    let user = [("f", "/a/b/c.tar.gz"), ("n", "7"), ("s", "hello")];
    assert_eq!(
        expand(
            &user,
            None,
            "$Fp(f)|$Fd(f)|$Fn(f)|$Fx(f)|$Fnx(f)|$Fdb(f)|$Fq(s)"
        )
        .unwrap(),
        "/a/b/|b/|c.tar|.gz|c.tar.gz|b|\"hello\""
    );
    assert_eq!(
        expand(
            &user,
            None,
            "$INT(n)|$INT(n,%03d)|$SUBSTR(s,1,2)|$SUBSTR(s,-2)|$CHOICE(n,a,b,c,d,e,f,g,h)"
        )
        .unwrap(),
        "7|007|el|lo|h"
    );
    assert!(
        expand(&[], None, "$RANDOM_INTEGER(1,9)")
            .unwrap_err()
            .contains("same every time")
    );
    assert!(
        expand(&[], None, "$(open")
            .unwrap_err()
            .contains("never closed")
    );
    assert!(
        expand(&[], None, "$BOGUS(x)")
            .unwrap_err()
            .contains("not a macro function")
    );
}

#[test]
fn civil_dates() {
    assert_eq!(civil(0), (1970, 1, 1));
    assert_eq!(civil(951_782_400), (2000, 2, 29));
    assert_eq!(civil(1_796_237_869), (2026, 12, 2));
}
