//! The background writer: every formatted event goes to one thread, which writes them to the
//! log file and/or standard error in order, whole, batching what has queued up into one write.

use std::io::{self, Write};
use std::sync::mpsc::{self, Receiver, SyncSender};

use tracing::Level;
use tracing_subscriber::fmt::MakeWriter;

use super::file::LogFile;

/// Hands every formatted event to the writer thread, which writes them to the file and/or
/// standard error in order, whole, batching what has queued up into one write. Callers never
/// wait for each other or for the disk, except when the queue is full (then they wait for room:
/// no line is dropped), and warnings and errors, which wait until they are written (so a line
/// logged just before the process ends is not lost).
#[derive(Clone, Debug)]
pub struct Sink {
    queue: SyncSender<Message>,
}

/// Events queued for the writer thread at most (about a megabyte of ordinary lines).
const QUEUE: usize = 4096;
/// Events written together at most.
const BATCH: usize = 512;

enum Message {
    Event(Vec<u8>),
    /// Answered once everything queued before it is written (and, if `true`, synced to disk).
    Sync(SyncSender<()>, bool),
}

impl Sink {
    pub fn start(file: Option<LogFile>, stderr: bool) -> io::Result<Sink> {
        let (queue, rx) = mpsc::sync_channel(QUEUE);
        std::thread::Builder::new().name("csi-proxy-log".into()).spawn(move || write_queued(rx, file, stderr))?;
        Ok(Sink { queue })
    }

    /// Waits until every event queued so far is written (and synced to disk with `fsync`).
    pub fn sync(&self, fsync: bool) {
        let (done, wait) = mpsc::sync_channel(1);
        if self.queue.send(Message::Sync(done, fsync)).is_ok() {
            let _ = wait.recv();
        }
    }
}

/// The writer thread: runs until every [`Sink`] is gone.
fn write_queued(rx: Receiver<Message>, mut file: Option<LogFile>, stderr: bool) {
    let mut events: Vec<Vec<u8>> = Vec::with_capacity(BATCH);
    let mut syncs = Vec::new();
    let mut reported = false;
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                Message::Event(e) => events.push(e),
                Message::Sync(done, fsync) => syncs.push((done, fsync)),
            }
            if events.len() < BATCH {
                next = rx.try_recv().ok();
            }
        }
        if let Some(f) = &mut file {
            if let Err(e) = f.write_batch(events.iter().map(Vec::as_slice)) {
                // Nobody to return the error to: say so once, on standard error.
                if !std::mem::replace(&mut reported, true) {
                    eprintln!("csi-proxy: cannot write to log file {}: {e}", f.path.display());
                }
            }
        }
        if stderr && !events.is_empty() {
            let mut err = io::stderr().lock();
            for e in &events {
                let _ = err.write_all(e);
            }
            let _ = err.flush();
        }
        events.clear();
        for (done, fsync) in syncs.drain(..) {
            if fsync {
                if let Some(f) = &mut file {
                    f.flush_and_sync();
                }
            }
            let _ = done.send(());
        }
    }
}

impl<'a> MakeWriter<'a> for Sink {
    type Writer = SinkWriter;

    fn make_writer(&'a self) -> SinkWriter {
        SinkWriter { sink: self.clone(), wait: false }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> SinkWriter {
        SinkWriter { sink: self.clone(), wait: *meta.level() <= Level::WARN }
    }
}

/// One event's writer (the formatter hands over one whole event per write).
pub struct SinkWriter {
    sink: Sink,
    /// Return only once the event is written.
    wait: bool,
}

impl Write for SinkWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.sink
            .queue
            .send(Message::Event(buf.to_vec()))
            .map_err(|_| io::Error::other("the log writer thread has stopped"))?;
        if self.wait {
            self.sink.sync(false);
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.sink.sync(false);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logging::file::{open_log_file, LogFile};
    use crate::logging::testutil::temp_dir;
    use crate::logging::KEEP_ROTATED;

    #[test]
    fn sink_appends_and_creates_directories() {
        let dir = temp_dir("sink");
        let path = dir.join("nested").join("csi-proxy.log");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"old line\n").unwrap();
        let sink = Sink::start(Some(LogFile::open(&path, 0, KEEP_ROTATED).unwrap()), false).unwrap();
        let mut writer = sink.make_writer();
        writer.write_all(b"new line\n").unwrap();
        writer.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old line\nnew line\n");

        let fresh = dir.join("a").join("b").join("c.log");
        open_log_file(&fresh).unwrap();
        assert!(fresh.is_file());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
