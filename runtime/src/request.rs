//! Non-blocking point-to-point: [`Ctx::isend`](crate::Ctx::isend) and
//! [`Ctx::irecv`](crate::Ctx::irecv) post a message and return a [`Request`] at once; the
//! transfer progresses while the rank computes and makes other calls, and `wait()` completes it.
//!
//! Soundness rests on ownership, never on `Drop` (`mem::forget` is safe): the backend never
//! holds a pointer into a user's tensor. `isend` copies the data into a buffer the backend
//! owns; `irecv` receives into one and copies into the tensor at `wait`. The request borrows
//! its tensor until then, so the program cannot read a receive's tensor too early nor change a
//! send's (which torch only asks users not to do).

use std::cell::{RefCell, RefMut};
use std::rc::Rc;

use crate::error::{Error, Result};
use crate::exec::{Backend, Ticket};
use crate::model::CallSite;
use crate::tensor::DeviceMemory;

/// A rank's backend, shared by its [`Ctx`](crate::Ctx) and the requests it posted.
pub(crate) type SharedBackend = Rc<RefCell<Box<dyn Backend>>>;

/// The backend, for one call of this rank (its own calls never overlap, so it is free).
#[inline]
pub(crate) fn engine(backend: &SharedBackend) -> Result<RefMut<'_, Box<dyn Backend>>> {
    backend.try_borrow_mut().map_err(|_| {
        Error::Internal("the backend was entered twice by one rank at the same time".into())
    })
}

/// A posted `isend` or `irecv` (≈ torch's `Work`): the message is matched in order with the
/// rank's other messages on the same pair and progresses during every later call; complete it
/// with [`Request::wait`].
///
/// A request that is dropped without `wait` still completes (a receive's data is then
/// discarded), and a rank program that returns with requests open waits for them first; a
/// request that can never be matched therefore ends as the deadlock or peer failure it is.
#[must_use = "a posted message completes at `wait()`; a receive's tensor is written only then"]
pub struct Request<'t> {
    backend: SharedBackend,
    ticket: Ticket,
    /// A receive's tensor: written at `wait`.
    into: Option<Landing<'t>>,
    site: CallSite,
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.into.is_some() {
            "irecv"
        } else {
            "isend"
        };
        write!(f, "Request({what} at {})", self.site)
    }
}

impl<'t> Request<'t> {
    pub(crate) fn new(
        backend: SharedBackend,
        ticket: Ticket,
        into: Option<Landing<'t>>,
        site: CallSite,
    ) -> Self {
        Request {
            backend,
            ticket,
            into,
            site,
        }
    }

    /// Blocks until the message has been delivered: for an `isend`, the receiver has its data;
    /// for an `irecv`, the tensor holds what was sent. Errors as a blocking call would (a
    /// deadlock naming every rank's call, a failed peer, a mismatched pair).
    #[track_caller]
    pub fn wait(self) -> Result<()> {
        let site = CallSite::caller();
        crate::guard::Guard::check(&site)?;
        let data = engine(&self.backend)?.wait(self.ticket, site)?;
        match self.into {
            Some(into) if into.len() != data.len() => Err(Error::Internal(format!(
                "{}: irecv received {} bytes into a tensor of {}",
                self.site,
                data.len(),
                into.len()
            ))),
            Some(Landing::Host(into)) => {
                into.copy_from_slice(&data);
                Ok(())
            }
            Some(Landing::Device(into)) => into.write(&data),
            None => Ok(()),
        }
    }

    /// Where the message was posted.
    pub fn site(&self) -> CallSite {
        self.site
    }
}

/// Where a receive's data lands at `wait`: a host tensor's bytes, or a device tensor's memory.
pub(crate) enum Landing<'t> {
    Host(&'t mut [u8]),
    Device(&'t mut dyn DeviceMemory),
}

impl Landing<'_> {
    fn len(&self) -> usize {
        match self {
            Landing::Host(b) => b.len(),
            Landing::Device(m) => m.len(),
        }
    }
}
