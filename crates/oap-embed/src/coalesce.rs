//! Coalescing of concurrent query embeddings into shared forward passes.
//!
//! A query embedding of a dozen tokens streams every weight of the model
//! through the cache and fans out over the inference threads for only a
//! dozen token rows. When many queries are in flight at once, each pays that
//! separately. [`Coalescing`] wraps an [`Embedder`] so that the
//! [`Embedder::embed_one`] calls which arrive while a pass is running are
//! embedded together in the next pass, one [`Embedder::embed`] call. That
//! pays only with an embedder whose batch pass costs about the sum of its
//! texts (the candle embedder packs the texts' token rows without padding);
//! a pass that pads every text to the longest can cost more per text than
//! passes of one.
//!
//! The callers themselves do the work (leader/follower, no extra thread and
//! no timer): a caller that finds no pass running becomes the leader and
//! embeds everything queued at that moment, its own text included; the
//! others wait on the queue. When a pass ends, its leader hands the results
//! out and wakes the waiters; the first of them to find no pass running leads
//! the next one. A lone query thus runs at once, as a batch of one.
//!
//! Failures stay with their own text: when a batched pass fails (or the
//! model panics), every text of it is embedded again alone, so only the
//! caller whose text is at fault sees an error. The leader role is released
//! by a guard whatever happens, so no caller can wedge the queue.
//!
//! Only `embed_one` is coalesced: [`Embedder::embed`] (already a batch) and
//! [`Embedder::embed_background`] (index rebuilds, at idle priority) go
//! straight to the wrapped model.

use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use crate::{Calibration, EmbedError, Embedder};

/// Input bytes per coalesced pass, summed over its texts (bytes stand in
/// for tokens before tokenizing). It bounds one pass's work, and so how
/// long a query that arrives during it waits: 16 queries of up to 256 bytes
/// (~60 tokens) fit. A text longer than this runs alone.
pub const COALESCE_BYTE_BUDGET: usize = 4096;

/// A fitting cap on texts per coalesced pass: the candle embedder's own
/// batch size (the daemon's `discovery.coalesce_queries` is off by default).
pub const DEFAULT_COALESCE_BATCH: usize = 16;

/// An [`Embedder`] that embeds concurrent [`Embedder::embed_one`] calls
/// together (see the module documentation).
pub struct Coalescing<E> {
    inner: E,
    max_batch: usize,
    state: Mutex<State>,
    /// Signalled when a pass ends (results ready, the leader role free).
    wake: Condvar,
}

#[derive(Default)]
struct State {
    /// Texts waiting for a pass, oldest first, with the side each is
    /// embedded as.
    queue: VecDeque<(u64, Side, String)>,
    /// Results of finished passes not yet collected by their caller.
    done: HashMap<u64, Result<Vec<f32>, EmbedError>>,
    /// Whether a leader is running a pass.
    running: bool,
    next_id: u64,
    stats: CoalesceStats,
}

/// Which of the inner embedder's calls a queued text goes through: a pass
/// holds texts of one side only, since a model with prompts embeds the
/// two differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// [`Embedder::embed_one`]: [`Embedder::embed`].
    Document,
    /// [`Embedder::embed_query`]: [`Embedder::embed_queries`].
    Query,
}

/// Counters of a [`Coalescing`] embedder since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoalesceStats {
    /// Forward passes run for `embed_one` calls.
    pub passes: u64,
    /// Texts embedded by those passes (`texts / passes` is the mean batch).
    pub texts: u64,
    /// Largest number of texts in one pass.
    pub largest: u64,
    /// Batched passes that failed and were redone text by text.
    pub retried: u64,
}

impl<E: Embedder> Coalescing<E> {
    /// Wraps `inner`; a pass holds at most `max_batch` texts (at least one)
    /// and at most [`COALESCE_BYTE_BUDGET`] input bytes in all.
    pub fn new(inner: E, max_batch: usize) -> Self {
        Self {
            inner,
            max_batch: max_batch.max(1),
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        }
    }

    /// The wrapped embedder.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    /// Most texts per pass.
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Texts queued for the next pass right now (not the ones in a running
    /// pass).
    pub fn queued(&self) -> usize {
        self.lock().queue.len()
    }

    /// Counters since the wrapper was made.
    pub fn stats(&self) -> CoalesceStats {
        self.lock().stats
    }

    /// The state lock. A panic never happens while it is held (the model
    /// runs outside it), so a poisoned lock still holds consistent state.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.wake
            .wait(state)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the oldest queued texts that fit in one pass, all of the
    /// oldest one's side.
    fn take_batch(&self, state: &mut State) -> (Side, Vec<(u64, String)>) {
        let mut batch: Vec<(u64, String)> = Vec::new();
        let side = state
            .queue
            .front()
            .map_or(Side::Document, |(_, side, _)| *side);
        let mut bytes = 0usize;
        while batch.len() < self.max_batch {
            let Some((_, front_side, text)) = state.queue.front() else {
                break;
            };
            if *front_side != side {
                break;
            }
            let more = bytes.saturating_add(text.len());
            if !batch.is_empty() && more > COALESCE_BYTE_BUDGET {
                break;
            }
            bytes = more;
            if let Some((id, _, text)) = state.queue.pop_front() {
                batch.push((id, text));
            }
        }
        (side, batch)
    }

    /// One pass over `texts`: one result per text, in order. A failed
    /// batch is redone text by text so an error stays with its own text.
    fn run_pass(&self, side: Side, texts: &[&str]) -> (Vec<Result<Vec<f32>, EmbedError>>, bool) {
        if let [text] = texts {
            return (vec![self.embed_alone(side, text)], false);
        }
        match guarded(|| self.embed_side(side, texts)) {
            Ok(vectors) if vectors.len() == texts.len() => {
                (vectors.into_iter().map(Ok).collect(), false)
            }
            Ok(vectors) => {
                tracing::warn!(
                    texts = texts.len(),
                    vectors = vectors.len(),
                    "embedding model returned a wrong number of vectors for a coalesced batch; embedding each query alone"
                );
                (
                    texts.iter().map(|t| self.embed_alone(side, t)).collect(),
                    true,
                )
            }
            Err(error) => {
                tracing::debug!(
                    texts = texts.len(),
                    %error,
                    "coalesced query embedding failed; embedding each query alone"
                );
                (
                    texts.iter().map(|t| self.embed_alone(side, t)).collect(),
                    true,
                )
            }
        }
    }

    /// The inner embedder's batch call for `side`.
    fn embed_side(&self, side: Side, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        match side {
            Side::Document => self.inner.embed(texts),
            Side::Query => self.inner.embed_queries(texts),
        }
    }

    /// One text, as a batch of one (what `embed_one` does without coalescing).
    fn embed_alone(&self, side: Side, text: &str) -> Result<Vec<f32>, EmbedError> {
        let mut vectors = guarded(|| self.embed_side(side, &[text]))?;
        match (vectors.pop(), vectors.is_empty()) {
            (Some(vector), true) => Ok(vector),
            (None, _) => Err(EmbedError::Inference("model returned no embedding".into())),
            (Some(_), false) => Err(EmbedError::Inference(format!(
                "model returned {} embeddings for one text",
                vectors.len() + 1
            ))),
        }
    }
}

/// Runs `f`, turning a panic into an error so a model bug on one text
/// reaches the callers of that pass as an error and the queue keeps going.
fn guarded<T>(f: impl FnOnce() -> Result<T, EmbedError>) -> Result<T, EmbedError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let reason = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown cause".to_owned());
        tracing::error!(%reason, "embedding model panicked");
        Err(EmbedError::Inference(format!(
            "embedding model panicked: {reason}"
        )))
    })
}

/// Releases the leader role when the pass ends, however it ends: the
/// texts of the pass that have no result yet get an error (so their callers
/// stop waiting) and every waiter is woken.
struct Leader<'a, E: Embedder> {
    owner: &'a Coalescing<E>,
    ids: Vec<u64>,
    results: Option<Vec<Result<Vec<f32>, EmbedError>>>,
    retried: bool,
}

impl<E: Embedder> Drop for Leader<'_, E> {
    fn drop(&mut self) {
        let mut results = self.results.take().unwrap_or_default().into_iter();
        let mut state = self.owner.lock();
        let count = self.ids.len() as u64;
        state.stats.passes += 1;
        state.stats.texts += count;
        state.stats.largest = state.stats.largest.max(count);
        state.stats.retried += u64::from(self.retried);
        for &id in &self.ids {
            let result = results.next().unwrap_or_else(|| {
                Err(EmbedError::Inference(
                    "the coalesced embedding pass ended without a result".into(),
                ))
            });
            state.done.insert(id, result);
        }
        state.running = false;
        drop(state);
        self.owner.wake.notify_all();
    }
}

impl<E: Embedder> Embedder for Coalescing<E> {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn calibration(&self) -> Calibration {
        self.inner.calibration()
    }

    fn dim(&self) -> usize {
        self.inner.dim()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.inner.embed(texts)
    }

    fn embed_background(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.inner.embed_background(texts)
    }

    fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.inner.embed_queries(texts)
    }

    fn embed_one(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.coalesce(Side::Document, text)
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.coalesce(Side::Query, text)
    }
}

impl<E: Embedder> Coalescing<E> {
    /// Embeds `text` as `side` in a shared pass.
    fn coalesce(&self, side: Side, text: &str) -> Result<Vec<f32>, EmbedError> {
        if self.max_batch == 1 {
            return self.embed_alone(side, text);
        }
        let mut state = self.lock();
        let id = state.next_id;
        state.next_id = state.next_id.wrapping_add(1);
        state.queue.push_back((id, side, text.to_owned()));
        loop {
            if let Some(result) = state.done.remove(&id) {
                return result;
            }
            if state.running {
                state = self.wait(state);
                continue;
            }
            // No pass running: lead one over what is queued (this caller's
            // text is among it, since it has no result and no pass holds it).
            state.running = true;
            let (side, batch) = self.take_batch(&mut state);
            drop(state);
            let mut leader = Leader {
                owner: self,
                ids: batch.iter().map(|(id, _)| *id).collect(),
                results: None,
                retried: false,
            };
            let texts: Vec<&str> = batch.iter().map(|(_, t)| t.as_str()).collect();
            let (results, retried) = self.run_pass(side, &texts);
            leader.results = Some(results);
            leader.retried = retried;
            drop(leader);
            state = self.lock();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::sync::{Arc, Barrier};
    use std::thread::JoinHandle;

    use super::*;

    /// A model that records every batch it is given. Its first call can be
    /// held until the test releases it, so that the test knows a pass is
    /// running while it queues more texts.
    #[derive(Default)]
    struct Fake {
        calls: Mutex<Vec<Vec<String>>>,
        /// (entered, release) for the first call.
        hold: Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>>,
        /// A batch holding this text fails.
        bad: Option<&'static str>,
        /// A batch holding this text panics.
        panics: Option<&'static str>,
    }

    /// A vector that tells texts apart: length, byte sum, first byte.
    fn vector(text: &str) -> Vec<f32> {
        let sum: u32 = text.bytes().map(u32::from).sum();
        vec![
            text.len() as f32,
            sum as f32,
            f32::from(text.bytes().next().unwrap_or(0)),
        ]
    }

    impl Embedder for Fake {
        fn model_id(&self) -> &str {
            "fake"
        }

        fn dim(&self) -> usize {
            3
        }

        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.calls
                .lock()
                .unwrap()
                .push(texts.iter().map(|t| (*t).to_owned()).collect());
            let hold = self.hold.lock().unwrap().take();
            if let Some((entered, release)) = hold {
                entered.send(()).unwrap();
                release.recv().unwrap();
            }
            if self.panics.is_some_and(|p| texts.contains(&p)) {
                panic!("the fake model cannot embed this");
            }
            if self.bad.is_some_and(|b| texts.contains(&b)) {
                return Err(EmbedError::Inference("the fake model refuses this".into()));
            }
            Ok(texts.iter().map(|t| vector(t)).collect())
        }
    }

    type Call = JoinHandle<Result<Vec<f32>, EmbedError>>;

    fn call(c: &Arc<Coalescing<Fake>>, text: &str) -> Call {
        let (c, text) = (Arc::clone(c), text.to_owned());
        std::thread::spawn(move || c.embed_one(&text))
    }

    /// Starts `leader` and returns once its pass is inside the model (held),
    /// with the release for that pass.
    fn start_held(c: &Arc<Coalescing<Fake>>, leader: &str) -> (Call, mpsc::Sender<()>) {
        let (entered_tx, entered_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel();
        *c.inner().hold.lock().unwrap() = Some((entered_tx, release_rx));
        let handle = call(c, leader);
        entered_rx.recv().unwrap();
        (handle, release_tx)
    }

    /// Waits (without a deadline: the test harness has one) until `n` texts
    /// are queued behind the running pass.
    fn until_queued(c: &Coalescing<Fake>, n: usize) {
        while c.queued() < n {
            std::thread::yield_now();
        }
    }

    fn calls(c: &Coalescing<Fake>) -> Vec<Vec<String>> {
        c.inner().calls.lock().unwrap().clone()
    }

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    #[test]
    fn a_lone_call_runs_at_once_as_a_batch_of_one() {
        let c = Coalescing::new(Fake::default(), 16);
        assert_eq!(c.embed_one("alone").unwrap(), vector("alone"));
        assert_eq!(c.embed_one("again").unwrap(), vector("again"));
        assert_eq!(
            calls(&c),
            vec![vec!["alone".to_owned()], vec!["again".to_owned()]]
        );
        let stats = c.stats();
        assert_eq!((stats.passes, stats.texts, stats.largest), (2, 2, 1));
        assert_eq!(c.queued(), 0);
    }

    #[test]
    fn concurrent_calls_share_a_pass_and_each_gets_its_own_vector() {
        const FOLLOWERS: usize = 12;
        let c = Arc::new(Coalescing::new(Fake::default(), 16));
        let (leader, release) = start_held(&c, "first query");
        let barrier = Arc::new(Barrier::new(FOLLOWERS));
        let texts: Vec<String> = (0..FOLLOWERS)
            .map(|i| format!("query number {i}"))
            .collect();
        let followers: Vec<(String, Call)> = texts
            .iter()
            .map(|text| {
                let (c, barrier, owned) = (Arc::clone(&c), Arc::clone(&barrier), text.clone());
                let handle = std::thread::spawn(move || {
                    barrier.wait();
                    c.embed_one(&owned)
                });
                (text.clone(), handle)
            })
            .collect();
        until_queued(&c, FOLLOWERS);
        release.send(()).unwrap();

        assert_eq!(leader.join().unwrap().unwrap(), vector("first query"));
        for (text, handle) in followers {
            assert_eq!(handle.join().unwrap().unwrap(), vector(&text), "{text}");
        }
        let calls = calls(&c);
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert_eq!(calls[0], vec!["first query".to_owned()]);
        assert_eq!(sorted(calls[1].clone()), sorted(texts));
        let stats = c.stats();
        assert_eq!(
            (stats.passes, stats.texts, stats.largest, stats.retried),
            (2, 1 + FOLLOWERS as u64, FOLLOWERS as u64, 0)
        );
    }

    #[test]
    fn an_error_reaches_only_the_caller_of_that_text() {
        let fake = Fake {
            bad: Some("bad"),
            ..Fake::default()
        };
        let c = Arc::new(Coalescing::new(fake, 16));
        let (leader, release) = start_held(&c, "first");
        let good1 = call(&c, "good one");
        let bad = call(&c, "bad");
        let good2 = call(&c, "good two");
        until_queued(&c, 3);
        release.send(()).unwrap();

        assert!(leader.join().unwrap().is_ok());
        assert_eq!(good1.join().unwrap().unwrap(), vector("good one"));
        assert_eq!(good2.join().unwrap().unwrap(), vector("good two"));
        let err = bad.join().unwrap().unwrap_err();
        assert!(err.to_string().contains("refuses"), "{err}");
        // The failed batch, then each of its texts alone.
        let calls = calls(&c);
        assert_eq!(calls.len(), 5, "{calls:?}");
        assert_eq!(calls[1].len(), 3);
        assert!(calls[2..].iter().all(|batch| batch.len() == 1));
        assert_eq!(c.stats().retried, 1);
    }

    #[test]
    fn a_panicking_model_fails_only_its_text_and_the_queue_keeps_serving() {
        let fake = Fake {
            panics: Some("boom"),
            ..Fake::default()
        };
        let c = Arc::new(Coalescing::new(fake, 16));
        // Alone: the caller gets an error, not a panic.
        let err = c.embed_one("boom").unwrap_err();
        assert!(err.to_string().contains("panicked"), "{err}");

        // In a batch: only its caller fails.
        let (leader, release) = start_held(&c, "first");
        let boom = call(&c, "boom");
        let fine = call(&c, "fine");
        until_queued(&c, 2);
        release.send(()).unwrap();
        assert!(leader.join().unwrap().is_ok());
        assert!(boom.join().unwrap().is_err());
        assert_eq!(fine.join().unwrap().unwrap(), vector("fine"));

        // Nothing is left leading or waiting: the next caller runs at once.
        assert_eq!(c.embed_one("after").unwrap(), vector("after"));
        assert_eq!(c.queued(), 0);
        let state = c.lock();
        assert!(state.done.is_empty() && !state.running);
    }

    #[test]
    fn a_pass_takes_at_most_max_batch_texts_oldest_first() {
        let c = Arc::new(Coalescing::new(Fake::default(), 3));
        let (leader, release) = start_held(&c, "first");
        let mut waiting = Vec::new();
        for i in 0..5 {
            waiting.push((format!("q{i}"), call(&c, &format!("q{i}"))));
            until_queued(&c, i + 1);
        }
        release.send(()).unwrap();
        assert!(leader.join().unwrap().is_ok());
        for (text, handle) in waiting {
            assert_eq!(handle.join().unwrap().unwrap(), vector(&text));
        }
        let calls = calls(&c);
        assert_eq!(calls[1..], [["q0", "q1", "q2"].as_slice(), &["q3", "q4"]]);
    }

    #[test]
    fn a_pass_holds_at_most_the_byte_budget() {
        let c = Arc::new(Coalescing::new(Fake::default(), 16));
        let half = "word ".repeat(COALESCE_BYTE_BUDGET / 10);
        let long = "word ".repeat(COALESCE_BYTE_BUDGET / 5 + 1);
        let (leader, release) = start_held(&c, "first");
        let mut waiting = Vec::new();
        // Two halves fit one pass; a third half starts the next, which the
        // text longer than the budget does not join: it runs alone.
        let texts = [
            half.as_str(),
            half.as_str(),
            half.as_str(),
            long.as_str(),
            "short a",
            "short b",
        ];
        for (i, text) in texts.iter().enumerate() {
            waiting.push((text.to_string(), call(&c, text)));
            until_queued(&c, i + 1);
        }
        release.send(()).unwrap();
        assert!(leader.join().unwrap().is_ok());
        for (text, handle) in waiting {
            assert_eq!(handle.join().unwrap().unwrap(), vector(&text));
        }
        let lens: Vec<usize> = calls(&c).iter().map(Vec::len).collect();
        assert_eq!(lens, [1, 2, 1, 1, 2]);
    }

    #[test]
    fn a_max_batch_of_one_embeds_each_call_alone_and_batches_pass_through() {
        let c = Coalescing::new(Fake::default(), 1);
        assert_eq!(c.embed_one("x").unwrap(), vector("x"));
        assert_eq!(c.embed(&["a", "b"]).unwrap(), [vector("a"), vector("b")]);
        assert_eq!(c.embed_background(&["c"]).unwrap(), [vector("c")]);
        assert_eq!((c.model_id(), c.dim()), ("fake", 3));
        assert_eq!(c.stats().passes, 0, "only coalesced passes are counted");
    }
}
