use oap_index::{is_stopword, stem, tokenize};

#[test]
fn basic_split_lowercase_stopwords() {
    assert_eq!(
        tokenize("Convert the PDF files to plain-text!"),
        vec!["convert", "pdf", "fil", "plain", "text"]
    );
    assert_eq!(tokenize("the and of to a"), Vec::<String>::new());
    assert_eq!(tokenize(""), Vec::<String>::new());
    assert_eq!(tokenize("  ,;--  "), Vec::<String>::new());
    // "don't" -> "don" (stopword) + "t" (1 char).
    assert_eq!(tokenize("don't"), Vec::<String>::new());
    assert!(is_stopword("the"));
    assert!(!is_stopword("pdf"));
}

#[test]
fn single_chars_and_digits() {
    assert_eq!(tokenize("x 3 y 42 z9"), vec!["3", "42", "z9"]);
    assert_eq!(tokenize("mp3s to wav"), vec!["mp3s", "wav"]);
}

#[test]
fn unicode_aware() {
    // Lowercased, split on non-alphanumerics, non-ASCII words not stemmed.
    assert_eq!(
        tokenize("Größe ÜBER Straße—café"),
        vec!["größe", "über", "straße", "café"]
    );
    assert_eq!(tokenize("日本語のテキスト"), vec!["日本語のテキスト"]);
    assert_eq!(tokenize("ΑΘΗΝΑ"), vec!["αθηνα"]);
}

#[test]
fn long_tokens_dropped() {
    let long = "a".repeat(65);
    let ok = "b".repeat(64);
    assert_eq!(tokenize(&format!("{long} {ok}")), vec![stem(&ok)]);
}

#[test]
fn stemming() {
    let cases = [
        ("queries", "query"),
        ("running", "run"),
        ("parse", "pars"),
        ("parses", "pars"),
        ("parsed", "pars"),
        ("parsing", "pars"),
        ("quickly", "quick"),
        ("classes", "class"),
        ("class", "class"),
        ("status", "status"),
        ("analysis", "analysis"),
        ("boxes", "box"),
        ("matches", "match"),
        ("embedded", "embed"),
        ("embedding", "embed"),
        ("embeddings", "embed"),
        ("installing", "install"),
        ("tools", "tool"),
        ("images", "imag"),
        ("image", "imag"),
        ("converted", "convert"),
        ("gas", "gas"),
        ("need", "need"),
        ("apply", "apply"),
    ];
    for (w, s) in cases {
        assert_eq!(stem(w), s, "stem({w})");
    }
}

#[test]
fn deterministic() {
    let t = "Embedding vectors for quickly searching indexed manifests";
    assert_eq!(tokenize(t), tokenize(t));
    assert_eq!(
        tokenize(t),
        vec!["embed", "vector", "quick", "search", "index", "manifest"]
    );
}
