//! The two connection budgets of the server shell: connections that have
//! no request in progress, and requests being served.
//!
//! A connection still sending its request head, or idle between requests
//! on keep-alive, is *pending*: it costs a socket and a task, nothing more,
//! and the server cannot tell a slow client from an attacker that trickles
//! bytes to hold it. Pending connections share one budget
//! (`server.max_pending_connections`) across all clients; when it is full,
//! the oldest pending connection is closed to admit the new one, so no
//! number of trickling connections, from however many addresses, keeps a
//! client that sends its head promptly waiting: its head is complete long
//! before the newer connections push it out.
//!
//! A complete head takes a slot of the served budget
//! (`server.max_connections`) and holds it until its answer has been
//! handed to the socket; then the connection is pending again, once it
//! waits for its next request. A complete head waiting for a served slot
//! stays pending (and may be shed), so that wait is bounded too.

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// The pending connections, oldest first, each with the signal that
/// closes it.
#[derive(Debug)]
pub struct Pending {
    capacity: usize,
    queue: Mutex<Queue>,
}

#[derive(Debug, Default)]
struct Queue {
    /// The next ticket; tickets grow with time, so the smallest is the
    /// connection pending longest.
    next: u64,
    waiting: BTreeMap<u64, Arc<Notify>>,
    shed: u64,
}

impl Pending {
    /// A budget of `capacity` pending connections (at least one).
    pub fn new(capacity: usize) -> Pending {
        Pending {
            capacity: capacity.max(1),
            queue: Mutex::new(Queue::default()),
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a connection whose close signal is `shed`, closing the
    /// oldest pending ones while the budget is full; the ticket to leave
    /// with.
    fn enter(&self, shed: &Arc<Notify>) -> u64 {
        let mut queue = self.queue();
        while queue.waiting.len() >= self.capacity {
            let Some((_, oldest)) = queue.waiting.pop_first() else {
                break;
            };
            // A stored permit: the connection closes even if it is not
            // waiting on the signal at this instant.
            oldest.notify_one();
            queue.shed += 1;
        }
        let ticket = queue.next;
        queue.next += 1;
        queue.waiting.insert(ticket, shed.clone());
        ticket
    }

    /// Removes `ticket`; false when it was shed already.
    fn leave(&self, ticket: u64) -> bool {
        self.queue().waiting.remove(&ticket).is_some()
    }

    /// Connections pending now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.queue().waiting.len()
    }

    /// Whether no connection is pending.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Connections closed so far to admit newer ones.
    #[cfg(test)]
    pub fn shed(&self) -> u64 {
        self.queue().shed
    }
}

/// Where one connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// In the pending budget under this ticket.
    Pending(u64),
    /// A request holds a served slot.
    Serving,
    /// The answer was handed over; pending again once the next head is read.
    Answered,
    /// Closed to admit a newer connection.
    Shed,
}

/// One connection's place in the two budgets.
#[derive(Debug)]
pub struct Occupancy {
    pending: Arc<Pending>,
    served: Arc<Semaphore>,
    shed: Arc<Notify>,
    phase: Mutex<Phase>,
}

impl Occupancy {
    /// A new connection, pending at once (possibly shedding the oldest).
    pub fn admit(pending: &Arc<Pending>, served: &Arc<Semaphore>) -> Arc<Occupancy> {
        let shed = Arc::new(Notify::new());
        let ticket = pending.enter(&shed);
        Arc::new(Occupancy {
            pending: pending.clone(),
            served: served.clone(),
            shed,
            phase: Mutex::new(Phase::Pending(ticket)),
        })
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Resolves when the connection was shed: close it.
    pub async fn shed(&self) {
        self.shed.notified().await;
    }

    /// The connection reads again after an answer: it waits for its next
    /// head, so it is pending again.
    fn reading(&self) {
        let mut phase = self.phase();
        if *phase == Phase::Answered {
            *phase = Phase::Pending(self.pending.enter(&self.shed));
        }
    }

    /// A complete head: waits for a served slot (pending meanwhile), then
    /// leaves the pending budget. `None` when the connection was shed.
    pub async fn serve(self: &Arc<Self>) -> Option<Served> {
        let permit = self.served.clone().acquire_owned().await.ok()?;
        let mut phase = self.phase();
        match *phase {
            Phase::Pending(ticket) if !self.pending.leave(ticket) => {
                *phase = Phase::Shed;
                return None;
            }
            Phase::Shed => return None,
            _ => {}
        }
        *phase = Phase::Serving;
        drop(phase);
        Some(Served {
            occupancy: self.clone(),
            _permit: permit,
        })
    }
}

impl Drop for Occupancy {
    fn drop(&mut self) {
        if let Phase::Pending(ticket) = *self.phase() {
            self.pending.leave(ticket);
        }
    }
}

/// A served slot, held by the answer's body until hyper has written it
/// (or dropped it).
#[derive(Debug)]
pub struct Served {
    occupancy: Arc<Occupancy>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Served {
    fn drop(&mut self) {
        let mut phase = self.occupancy.phase();
        if *phase == Phase::Serving {
            *phase = Phase::Answered;
        }
    }
}

/// The connection's IO as hyper sees it: a read after an answer means the
/// connection waits for its next request, which makes it pending again.
pub struct Watched<S> {
    inner: S,
    occupancy: Arc<Occupancy>,
}

impl<S> Watched<S> {
    /// `inner`, reporting reads to `occupancy`.
    pub fn new(inner: S, occupancy: Arc<Occupancy>) -> Self {
        Watched { inner, occupancy }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.occupancy.reading();
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn is_shed(occupancy: &Occupancy) -> bool {
        tokio::time::timeout(Duration::from_millis(20), occupancy.shed())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_full_budget_sheds_the_oldest_pending_connection() {
        let pending = Arc::new(Pending::new(2));
        let served = Arc::new(Semaphore::new(8));
        let first = Occupancy::admit(&pending, &served);
        let second = Occupancy::admit(&pending, &served);
        let third = Occupancy::admit(&pending, &served);
        assert!(is_shed(&first).await);
        assert!(!is_shed(&second).await);
        assert!(!is_shed(&third).await);
        assert_eq!((pending.len(), pending.shed()), (2, 1));
        // A shed connection gets no served slot.
        assert!(first.serve().await.is_none());
    }

    #[tokio::test]
    async fn a_served_request_leaves_the_budget_and_comes_back_when_read_again() {
        let pending = Arc::new(Pending::new(1));
        let served = Arc::new(Semaphore::new(1));
        let connection = Occupancy::admit(&pending, &served);
        let slot = connection.serve().await.expect("a served slot");
        assert!(pending.is_empty());
        assert_eq!(served.available_permits(), 0);
        // Another connection is pending meanwhile and is not shed.
        let other = Occupancy::admit(&pending, &served);
        // Reads while serving (the body) change nothing.
        connection.reading();
        assert_eq!(pending.len(), 1);
        drop(slot);
        assert_eq!(served.available_permits(), 1);
        // Answered, not pending until it reads for its next head, which
        // then sheds the older pending connection.
        assert_eq!(pending.len(), 1);
        connection.reading();
        assert!(is_shed(&other).await);
        assert!(!is_shed(&connection).await);
        drop(connection);
        assert!(pending.is_empty());
    }
}
