//! When a launched execution finished: each device's completion event, and the instant the
//! plugin signalled it, taken by a callback in the plugin's own thread.
//!
//! A launch ([`Executable::launch`](super::Executable::launch)) returns as soon as the plugin
//! has queued the work, so the host can prepare (and queue) the next step while this one runs.
//! What the host then needs to know is when the devices were done. Awaiting the event tells
//! that only to within the host's own latency (it may be busy uploading the next batch when the
//! event fires), so each event also gets a `PJRT_Event_OnReady` callback that notes the time
//! on the plugin's side the moment the event is set. That time is what a benchmark may
//! subtract from wall time and still call measured. A plugin without `PJRT_Event_OnReady` gets
//! the host's time instead, taken when the await returns.

use std::ffi::c_void;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use super::client::ClientInner;
use super::{args, pjrt_fn, plugin_string};
use crate::error::{Error, Result};
use crate::ffi;

/// What the callbacks have recorded so far.
#[derive(Debug, Default)]
struct Marks {
    /// Callbacks registered and not yet run.
    pending: usize,
    /// The latest instant a device reported done.
    last: Option<Instant>,
    /// The first error an event carried, as the plugin's message.
    error: Option<String>,
}

/// The callbacks' shared record; one `Arc` is handed to each registered callback.
#[derive(Debug)]
struct Record {
    marks: Mutex<Marks>,
    done: Condvar,
    /// The plugin's `PJRT_Error_Message` and `PJRT_Error_Destroy`, copied at registration so a
    /// callback never touches the client (the library outlives every callback: see
    /// [`Completion`]'s `Drop`).
    error_message: Option<ffi::PjrtVoidFn<ffi::PJRT_Error_Message_Args>>,
    error_destroy: Option<ffi::PjrtVoidFn<ffi::PJRT_Error_Destroy_Args>>,
}

impl Record {
    fn lock(&self) -> MutexGuard<'_, Marks> {
        // A poisoned lock only means a panic elsewhere; the marks themselves stay consistent.
        self.marks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Blocks until every registered callback has run.
    fn wait_for_callbacks(&self) -> MutexGuard<'_, Marks> {
        let mut marks = self.lock();
        while marks.pending > 0 {
            marks = self
                .done
                .wait(marks)
                .unwrap_or_else(PoisonError::into_inner);
        }
        marks
    }

    /// Notes one device done at `at` (with the plugin's message when its event failed).
    fn note(&self, at: Instant, error: Option<String>) {
        let mut marks = self.lock();
        marks.last = Some(marks.last.map_or(at, |t| t.max(at)));
        if marks.error.is_none() {
            marks.error = error;
        }
        marks.pending = marks.pending.saturating_sub(1);
        if marks.pending == 0 {
            self.done.notify_all();
        }
    }

    /// The message of an error a callback was handed, destroying the error.
    ///
    /// # Safety
    /// - `error` is a live error object the plugin passed to the callback, not yet destroyed.
    unsafe fn take_error(&self, error: *mut ffi::PJRT_Error) -> String {
        let mut message = String::from("(the plugin gave no message)");
        if let Some(f) = self.error_message {
            let mut a = args::<ffi::PJRT_Error_Message_Args>();
            a.error = error;
            // SAFETY: `error` is live (the caller's contract); `a` is initialised.
            unsafe { f(&mut a) };
            // SAFETY: the message is owned by `error`, alive until it is destroyed below.
            message = unsafe { plugin_string(a.message, a.message_size) };
        }
        if let Some(f) = self.error_destroy {
            let mut a = args::<ffi::PJRT_Error_Destroy_Args>();
            a.error = error;
            // SAFETY: `error` is live and owned by the callback (the header says so); it is not
            // used after this.
            unsafe { f(&mut a) };
        }
        message
    }
}

/// The `PJRT_Event_OnReady` callback: notes the time and the event's error.
///
/// # Safety
/// - `user_arg` is a pointer from `Arc::into_raw` of an `Arc<Record>` made for this one
///   registration (reclaimed here, exactly once).
/// - `error` is null or an error object the callback now owns.
unsafe extern "C" fn on_ready(error: *mut ffi::PJRT_Error, user_arg: *mut c_void) {
    let at = Instant::now();
    // SAFETY: `user_arg` came from `Arc::into_raw` for this registration (the contract), and
    // the plugin calls the callback once, so the count is given back exactly once.
    let record = unsafe { Arc::from_raw(user_arg.cast::<Record>().cast_const()) };
    let error = (!error.is_null()).then(|| {
        // SAFETY: non-null, owned by this callback and not yet destroyed.
        unsafe { record.take_error(error) }
    });
    record.note(at, error);
}

/// One launch's completion events, one per device, owned until they are awaited.
///
/// Dropping it waits for the events (and their callbacks), so no callback can run after the
/// client and its library are gone; a completion is therefore cheap to keep and safe to drop.
pub struct Completion {
    client: Arc<ClientInner>,
    /// Events not yet awaited and destroyed.
    events: Vec<*mut ffi::PJRT_Event>,
    record: Arc<Record>,
    /// Whether every event got its callback (else completion times are the host's).
    timed_by_plugin: bool,
    /// The result once awaited: the completion instant, or the first error.
    outcome: Option<std::result::Result<Instant, Failure>>,
}

// SAFETY: PJRT events may be awaited and destroyed from any thread; the record is `Sync`.
unsafe impl Send for Completion {}
// SAFETY: `&Completion` reads only the record (behind its mutex) and immutable fields.
unsafe impl Sync for Completion {}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion")
            .field("events", &self.events.len())
            .field("timed_by_plugin", &self.timed_by_plugin)
            .field("outcome", &self.outcome)
            .finish()
    }
}

impl Completion {
    /// Owns `events` (null entries are skipped: nothing to wait for) and asks the plugin to
    /// call back when each is ready. A callback that cannot be registered only costs
    /// precision: that completion is timed by the host.
    pub(crate) fn new(client: &Arc<ClientInner>, events: Vec<*mut ffi::PJRT_Event>) -> Completion {
        let api = &client.api;
        let events: Vec<_> = events.into_iter().filter(|e| !e.is_null()).collect();
        let record = Arc::new(Record {
            marks: Mutex::new(Marks::default()),
            done: Condvar::new(),
            error_message: pjrt_fn!(api, PJRT_Error_Message).ok(),
            error_destroy: pjrt_fn!(api, PJRT_Error_Destroy).ok(),
        });
        let mut timed_by_plugin = !events.is_empty();
        match pjrt_fn!(api, PJRT_Event_OnReady) {
            Ok(f) => {
                for &event in &events {
                    // Counted before registering: the callback may run before `f` returns.
                    record.lock().pending += 1;
                    let user_arg = Arc::into_raw(Arc::clone(&record)).cast_mut();
                    let mut a = args::<ffi::PJRT_Event_OnReady_Args>();
                    a.event = event;
                    a.callback = Some(on_ready);
                    a.user_arg = user_arg.cast();
                    // SAFETY: `event` is a live event we own; `on_ready` matches the callback
                    // type and `user_arg` is the `Arc` it reclaims.
                    let err = unsafe { f(&mut a) };
                    if api.check("PJRT_Event_OnReady", err).is_err() {
                        // Not registered, so the callback will never reclaim its `Arc`.
                        // SAFETY: `user_arg` is the pointer `Arc::into_raw` gave just above,
                        // not handed to anyone.
                        drop(unsafe { Arc::from_raw(user_arg) });
                        let mut marks = record.lock();
                        marks.pending -= 1;
                        timed_by_plugin = false;
                    }
                }
            }
            Err(_) => timed_by_plugin = false,
        }
        Completion {
            client: Arc::clone(client),
            events,
            record,
            timed_by_plugin,
            outcome: None,
        }
    }

    /// Whether the completion instants come from the plugin's callbacks (else the host took
    /// them when its wait returned).
    pub fn timed_by_plugin(&self) -> bool {
        self.timed_by_plugin
    }

    /// Whether every device has signalled completion, without blocking (false when that is
    /// only known by waiting: a plugin without callbacks).
    pub fn is_done(&self) -> bool {
        if self.outcome.is_some() || self.events.is_empty() {
            return true;
        }
        self.timed_by_plugin && self.record.lock().pending == 0
    }

    /// Blocks until every device is done and returns when the last one finished (the plugin's
    /// instant where it gives one), or the error the execution ended with.
    pub fn wait(&mut self) -> Result<Instant> {
        if self.outcome.is_none() {
            self.outcome = Some(self.await_all());
        }
        match &self.outcome {
            Some(Ok(at)) => Ok(*at),
            Some(Err(failure)) => Err(failure.to_error()),
            None => unreachable!("the outcome was set just above"),
        }
    }

    fn await_all(&mut self) -> std::result::Result<Instant, Failure> {
        let api = &self.client.api;
        let mut first: Option<Failure> = None;
        let mut keep = |r: Result<()>| {
            if let Err(e) = r
                && first.is_none()
            {
                first = Some(Failure::from(e));
            }
        };
        match pjrt_fn!(api, PJRT_Event_Await) {
            Ok(f) => {
                for &event in &self.events {
                    let mut a = args::<ffi::PJRT_Event_Await_Args>();
                    a.event = event;
                    // SAFETY: `event` is live: owned by us, destroyed only below.
                    let err = unsafe { f(&mut a) };
                    keep(api.check("PJRT_Event_Await", err));
                }
            }
            Err(e) => keep(Err(e)),
        }
        let host_time = Instant::now();
        // The callbacks may still be running (an awaiter can wake before the callbacks of the
        // same event have run); after this none is left.
        let marks = self.record.wait_for_callbacks();
        let (last, callback_error) = (marks.last, marks.error.clone());
        drop(marks);
        match pjrt_fn!(api, PJRT_Event_Destroy) {
            Ok(f) => {
                for event in self.events.drain(..) {
                    let mut a = args::<ffi::PJRT_Event_Destroy_Args>();
                    a.event = event;
                    // SAFETY: `event` is live and awaited; it is not used after this.
                    let err = unsafe { f(&mut a) };
                    keep(api.check("PJRT_Event_Destroy", err));
                }
            }
            // Without a destroy the events leak; there is nothing better to do.
            Err(e) => {
                self.events.clear();
                keep(Err(e));
            }
        }
        let callback_failure = callback_error.map(|message| Failure {
            call: "PJRT_Event_OnReady",
            code: crate::ErrorCode::Unknown,
            message,
        });
        match first.or(callback_failure) {
            Some(failure) => Err(failure),
            None if self.timed_by_plugin => Ok(last.unwrap_or(host_time)),
            None => Ok(host_time),
        }
    }
}

/// A failed execution as [`Completion::wait`] reports it, kept so a second wait reports it
/// again.
#[derive(Clone, Debug)]
struct Failure {
    call: &'static str,
    code: crate::ErrorCode,
    message: String,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        match e {
            Error::Pjrt {
                call,
                code,
                message,
            } => Failure {
                call,
                code,
                message,
            },
            other => Failure {
                call: "PJRT_Event_Await",
                code: crate::ErrorCode::Unknown,
                message: other.to_string(),
            },
        }
    }
}

impl Failure {
    fn to_error(&self) -> Error {
        Error::Pjrt {
            call: self.call,
            code: self.code,
            message: self.message.clone(),
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        // Waits so that no callback outlives the client; a failure here was the execution's,
        // which whoever cared has seen through `wait`.
        if self.outcome.is_none() {
            let _ = self.await_all();
        }
    }
}
