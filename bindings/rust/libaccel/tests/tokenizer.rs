//! The BERT WordPiece tokenizer: a vocabulary written here, and sentence-transformers'
//! all-MiniLM-L6-v2 tokenizer (build/minilm/model, from tools/fetch_minilm.sh; skipped without).

mod common;

use accel::{Status, Tokenizer};
use common::{repo_root, temp_dir};

#[test]
fn encodes_a_vocabulary_written_here() {
    let dir = temp_dir("tokenizer");
    let vocab = dir.join("vocab.txt");
    std::fs::write(&vocab, "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\n##s\n").unwrap();
    let tok = Tokenizer::load(&vocab).unwrap();
    assert_eq!(tok.encode("Hello worlds", 0).unwrap(), vec![2, 4, 5, 6, 3]);
    assert_eq!(tok.encode("Hello worlds", 3).unwrap(), vec![2, 4, 3]);
    assert_eq!(tok.encode(&"hello ".repeat(100), 0).unwrap().len(), 102); // past the first buffer
    let (ids, mask) = tok.encode_batch(["hello", "worlds hello"], 0).unwrap();
    assert_eq!(ids.shape().unwrap(), vec![2, 5]);
    assert_eq!(
        ids.to_vec::<i64>().unwrap(),
        vec![2, 4, 3, 0, 0, 2, 5, 6, 4, 3]
    );
    assert_eq!(
        mask.to_vec::<i64>().unwrap(),
        vec![1, 1, 1, 0, 0, 1, 1, 1, 1, 1]
    );
    assert_eq!(tok.token_id("[SEP]").unwrap(), 3);
    assert_eq!(tok.vocab_size().unwrap(), 7);
    assert_eq!(
        tok.token_id("nope").unwrap_err().status(),
        Status::InvalidArgument
    );
    assert_eq!(
        tok.encode("hello", 1).unwrap_err().status(),
        Status::InvalidArgument
    );
    let missing = Tokenizer::load(dir.join("missing.json")).unwrap_err();
    assert_eq!(missing.status(), Status::Io);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn minilm_as_tokenizers_encodes_it() {
    let model = repo_root().join("build/minilm/model");
    if !model.join("tokenizer.json").exists() {
        eprintln!("skipped: no {} (tools/fetch_minilm.sh)", model.display());
        return;
    }
    let tok = Tokenizer::load(&model).unwrap();
    // tokenizers 0.19.1's ids for these texts (text.tokenizer_differential checks thousands more).
    assert_eq!(
        tok.encode("Hello, World!", 256).unwrap(),
        vec![101, 7592, 1010, 2088, 999, 102]
    );
    assert_eq!(
        tok.encode("Crème brûlée", 256).unwrap(),
        vec![101, 13675, 21382, 7987, 9307, 2063, 102]
    );
    assert_eq!(tok.encode(&"word ".repeat(300), 256).unwrap().len(), 256);
    assert_eq!(tok.vocab_size().unwrap(), 30522); // config.json's vocab_size
                                                  // One tokenizer shared by threads at once.
    let tok = &tok;
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(move || {
                for _ in 0..50 {
                    assert_eq!(tok.encode("Hello, World!", 256).unwrap()[1], 7592);
                }
            });
        }
    });
}
