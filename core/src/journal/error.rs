//! The journal's typed errors.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Every way a journal call can fail. Bindings map each kind to their own error (its
/// [`JournalErrorKind::as_str`] name is stable).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JournalErrorKind {
    /// The journal directory (or a record in it) cannot be written: permission denied, a
    /// read-only file system.
    NotWritable,
    /// A symbolic link where the journal expects its directory or a record (J-3: never
    /// followed).
    Symlink,
    /// The file system is full (or the user's quota is exhausted). Nothing was replaced:
    /// the previous record, if any, is intact.
    NoSpace,
    /// The journal path (or the partition in it) exists and is not a directory.
    NotADirectory,
    /// No journal directory was given, `CYCLES_JOURNAL_DIR` is unset and there is no home
    /// directory.
    NoDirectory,
    /// The record given to `write` would not read back (empty reservation id, the mode's
    /// body missing, a body that is not one JSON object).
    InvalidRecord,
    /// The stored record did not parse or validate (J-4): it was renamed aside, see
    /// [`JournalError::quarantined_to`].
    Corrupt,
    /// The file under the asked id's name holds another reservation id; it was left alone.
    Misplaced,
    /// [`crate::journal::Journal::finish`] was given a settlement that has not ended, or
    /// [`crate::journal::Journal::persist`] one that does not ask for a write: nothing was
    /// touched.
    NotFinished,
    /// Any other I/O error.
    Io,
}

impl JournalErrorKind {
    /// Every kind, in declaration order (bindings build their error classes and status
    /// tables from it).
    pub const ALL: [JournalErrorKind; 10] = [
        JournalErrorKind::NotWritable,
        JournalErrorKind::Symlink,
        JournalErrorKind::NoSpace,
        JournalErrorKind::NotADirectory,
        JournalErrorKind::NoDirectory,
        JournalErrorKind::InvalidRecord,
        JournalErrorKind::Corrupt,
        JournalErrorKind::Misplaced,
        JournalErrorKind::NotFinished,
        JournalErrorKind::Io,
    ];

    /// The kind whose [`as_str`](Self::as_str) name is `name`, if any.
    pub fn from_name(name: &str) -> Option<JournalErrorKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// A stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            JournalErrorKind::NotWritable => "not_writable",
            JournalErrorKind::Symlink => "symlink",
            JournalErrorKind::NoSpace => "no_space",
            JournalErrorKind::NotADirectory => "not_a_directory",
            JournalErrorKind::NoDirectory => "no_directory",
            JournalErrorKind::InvalidRecord => "invalid_record",
            JournalErrorKind::Corrupt => "corrupt",
            JournalErrorKind::Misplaced => "misplaced",
            JournalErrorKind::NotFinished => "not_finished",
            JournalErrorKind::Io => "io",
        }
    }
}

/// A journal failure: its kind, the path concerned and what happened.
#[derive(Debug)]
pub struct JournalError {
    kind: JournalErrorKind,
    path: Option<PathBuf>,
    message: String,
    quarantined_to: Option<PathBuf>,
    source: Option<io::Error>,
}

impl JournalError {
    pub(crate) fn new(kind: JournalErrorKind, path: Option<&Path>, message: String) -> Self {
        JournalError {
            kind,
            path: path.map(Path::to_path_buf),
            message,
            quarantined_to: None,
            source: None,
        }
    }

    pub(crate) fn corrupt(path: &Path, message: String, moved: Option<PathBuf>) -> Self {
        let mut e = JournalError::new(JournalErrorKind::Corrupt, Some(path), message);
        e.quarantined_to = moved;
        e
    }

    /// An I/O error at `path` while doing `what`, classified.
    pub(crate) fn io(what: &str, path: &Path, err: io::Error) -> Self {
        let kind = classify(&err);
        JournalError {
            kind,
            path: Some(path.to_path_buf()),
            message: format!("{what}: {err}"),
            quarantined_to: None,
            source: Some(err),
        }
    }

    /// The kind.
    pub fn kind(&self) -> JournalErrorKind {
        self.kind
    }

    /// The file or directory concerned, where there is one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// What happened, without the path.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Where a corrupt record was moved to ([`JournalErrorKind::Corrupt`]); `None` if the
    /// rename itself failed (the file then stays where it was).
    pub fn quarantined_to(&self) -> Option<&Path> {
        self.quarantined_to.as_deref()
    }
}

/// Maps an OS error to a kind.
pub(crate) fn classify(err: &io::Error) -> JournalErrorKind {
    use rustix::io::Errno;
    match err.raw_os_error().map(Errno::from_raw_os_error) {
        Some(Errno::ACCESS | Errno::PERM | Errno::ROFS) => JournalErrorKind::NotWritable,
        Some(Errno::LOOP) => JournalErrorKind::Symlink,
        Some(Errno::NOSPC | Errno::DQUOT) => JournalErrorKind::NoSpace,
        Some(Errno::NOTDIR) => JournalErrorKind::NotADirectory,
        _ => JournalErrorKind::Io,
    }
}

impl fmt::Display for JournalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "journal {}: {}", self.kind.as_str(), self.message)?;
        if let Some(p) = &self.path {
            write!(f, " ({})", p.display())?;
        }
        if let Some(q) = &self.quarantined_to {
            write!(f, "; quarantined to {}", q.display())?;
        }
        Ok(())
    }
}

impl std::error::Error for JournalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e as _)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_map_to_kinds() {
        use rustix::io::Errno;
        let k = |e: Errno| classify(&io::Error::from_raw_os_error(e.raw_os_error()));
        assert_eq!(k(Errno::NOSPC), JournalErrorKind::NoSpace);
        assert_eq!(k(Errno::DQUOT), JournalErrorKind::NoSpace);
        assert_eq!(k(Errno::ACCESS), JournalErrorKind::NotWritable);
        assert_eq!(k(Errno::ROFS), JournalErrorKind::NotWritable);
        assert_eq!(k(Errno::LOOP), JournalErrorKind::Symlink);
        assert_eq!(k(Errno::NOTDIR), JournalErrorKind::NotADirectory);
        assert_eq!(k(Errno::IO), JournalErrorKind::Io);
    }

    #[test]
    fn all_lists_every_kind_once_and_names_round_trip() {
        // A new variant must be added to ALL: this match fails to compile otherwise, and
        // the position it returns must be the variant's place in ALL.
        let index = |k: JournalErrorKind| match k {
            JournalErrorKind::NotWritable => 0,
            JournalErrorKind::Symlink => 1,
            JournalErrorKind::NoSpace => 2,
            JournalErrorKind::NotADirectory => 3,
            JournalErrorKind::NoDirectory => 4,
            JournalErrorKind::InvalidRecord => 5,
            JournalErrorKind::Corrupt => 6,
            JournalErrorKind::Misplaced => 7,
            JournalErrorKind::NotFinished => 8,
            JournalErrorKind::Io => 9,
        };
        for (i, k) in JournalErrorKind::ALL.into_iter().enumerate() {
            assert_eq!(index(k), i);
            assert_eq!(JournalErrorKind::from_name(k.as_str()), Some(k));
        }
        assert_eq!(JournalErrorKind::from_name("Io"), None);
        assert_eq!(JournalErrorKind::from_name(""), None);
    }
}
