//! The stop signal every loop races its timer or its accept against.

use tokio::sync::watch;

/// Resolves [`Shutdown::wait`] in every clone once [`Trigger::fire`] is called (or the trigger
/// is dropped), however late a task starts waiting.
#[derive(Debug, Clone)]
pub struct Shutdown(watch::Receiver<bool>);

/// The sending half of [`Shutdown`].
#[derive(Debug)]
pub struct Trigger(watch::Sender<bool>);

/// A new trigger and its signal.
pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger(tx), Shutdown(rx))
}

impl Trigger {
    pub fn fire(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// Resolves once shutdown has begun.
    pub async fn wait(&mut self) {
        // An error means the trigger is gone, which is a shutdown too.
        let _ = self.0.wait_for(|&stop| stop).await;
    }
}
