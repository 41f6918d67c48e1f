use oap_index::{is_stopword, stem, tokenize, tokenize_with, Stemmer};

#[test]
fn basic_split_lowercase_stopwords() {
    assert_eq!(
        tokenize("Convert the PDF files to plain-text!"),
        vec!["convert", "pdf", "file", "plain", "text"]
    );
    // The light stemmer of earlier releases cut "files" to "fil".
    assert_eq!(
        tokenize_with("Convert the PDF files to plain-text!", Stemmer::Light),
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

#[test]
fn snowball_folds_the_suffixes_a_request_and_a_description_differ_by() {
    let same = [
        ("reminder", "remind"),
        ("reminders", "remind"),
        ("running", "run"),
        ("runs", "run"),
        ("queries", "query"),
        ("calculator", "calculate"),
        ("calculations", "calculate"),
        ("translation", "translate"),
        ("arithmetic", "arithmetical"),
    ];
    for (a, b) in same {
        assert_eq!(
            Stemmer::Snowball.stem(a),
            Stemmer::Snowball.stem(b),
            "{a} / {b}"
        );
        assert_eq!(tokenize(a), tokenize(b), "{a} / {b}");
    }
    assert_eq!(Stemmer::Snowball.stem("reminder"), "remind");
    assert_eq!(Stemmer::Snowball.stem("running"), "run");
    // The light stemmer keeps the derivations apart: why it was replaced.
    assert_ne!(
        Stemmer::Light.stem("reminder"),
        Stemmer::Light.stem("remind")
    );
    assert_ne!(
        Stemmer::Light.stem("calculator"),
        Stemmer::Light.stem("calculate")
    );
    // Words that differ in meaning stay apart.
    for (a, b) in [("general", "generate"), ("news", "new"), ("time", "timer")] {
        assert_ne!(
            Stemmer::Snowball.stem(a),
            Stemmer::Snowball.stem(b),
            "{a} / {b}"
        );
    }
}

#[test]
fn snowball_leaves_other_scripts_digits_and_stopwords_alone() {
    assert_eq!(
        tokenize_with("Größe ÜBER Straße—café", Stemmer::Snowball),
        vec!["größe", "über", "straße", "café"]
    );
    assert_eq!(tokenize("mp3s utf8 42"), vec!["mp3s", "utf8", "42"]);
    // Stopwords are dropped as written, before stemming: "being" is one,
    // although its stem is not.
    assert_eq!(tokenize("being bees"), vec!["bee"]);
    let long = "x".repeat(64);
    assert_eq!(tokenize(&long), vec![long.clone()]);
}
