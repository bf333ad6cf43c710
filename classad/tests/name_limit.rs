//! The process-wide cap on the symbol table (`symbol::set_table_limit`), in
//! a test binary of its own: the cap holds for the whole process.

use classad::ClassAd;
use classad::symbol::Symbol;

#[test]
fn a_full_table_refuses_new_names_and_serves_known_ones() {
    ClassAd::parse("[ Known = 1 ]").unwrap();
    classad::symbol::set_table_limit(Symbol::entries());
    let refused = ClassAd::parse_old("Known = 2\nFresh = 3").expect_err("a new name past the cap");
    assert!(
        refused.message.contains("max_attribute_names"),
        "{}",
        refused.message
    );
    assert!(classad::parse_expr("Fresher > 1").is_err());
    assert_eq!(Symbol::lookup("Fresh"), None);
    // What is known still parses, matches and evaluates.
    let ad = ClassAd::parse_old("Known = 2").unwrap();
    assert_eq!(ad.eval_attr("known").as_f64(), Some(2.0));
    assert!(ad.get("Fresh").is_none());
}
