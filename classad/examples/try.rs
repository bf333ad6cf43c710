fn main() {
    for a in std::env::args().skip(1) {
        match classad::parse_expr(&a) {
            Ok(e) => println!("{e}  =>  {}", classad::eval_with(&e, None, None)),
            Err(e) => println!("ERR {e}"),
        }
    }
}
