//! What an authenticated connection may ask of an OSD.

use basalt_proto::{Flags, Header, Opcode};
use std::fmt;

/// Capabilities of an entity: a bit set (the handshake's Result carries it as one byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Caps(u8);

impl Caps {
    /// Client I/O on volumes and buckets (not their removal or snapshots).
    pub const DATA: Caps = Caps(1);
    /// Every client request.
    pub const ADMIN: Caps = Caps(2);
    /// Daemons: everything, including OSD-to-OSD messages.
    pub const OSD: Caps = Caps(4);

    /// The byte on the wire.
    pub fn bits(self) -> u8 {
        self.0
    }

    /// From the byte on the wire (unknown bits are dropped: they grant nothing).
    pub fn from_bits(bits: u8) -> Caps {
        Caps(bits & 7)
    }

    /// Does this set hold every capability of `other`?
    pub fn contains(self, other: Caps) -> bool {
        self.0 & other.0 == other.0
    }

    /// Parse `data` or `admin` (what `basalt auth add --caps` takes).
    pub fn parse(s: &str) -> Result<Caps, crate::AuthError> {
        match s {
            "data" => Ok(Caps::DATA),
            "admin" => Ok(Caps::ADMIN),
            _ => Err(crate::AuthError::BadCaps { caps: s.into() }),
        }
    }

    /// May a connection with these capabilities send this request?
    pub fn permits(self, header: &Header) -> bool {
        if self.contains(Caps::OSD) {
            return true;
        }
        if header.flags.has(Flags::REPLICA) {
            return false;
        }
        match header.opcode {
            Opcode::List | Opcode::Pull | Opcode::Push => false,
            Opcode::Purge | Opcode::Fence => self.contains(Caps::ADMIN),
            _ => self.contains(Caps::ADMIN) || self.contains(Caps::DATA),
        }
    }
}

impl fmt::Display for Caps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names = Vec::new();
        if self.contains(Caps::OSD) {
            names.push("osd");
        }
        if self.contains(Caps::ADMIN) {
            names.push("admin");
        }
        if self.contains(Caps::DATA) {
            names.push("data");
        }
        if names.is_empty() {
            names.push("none");
        }
        f.write_str(&names.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_proto::ObjectId;

    fn header(opcode: Opcode, replica: bool) -> Header {
        let mut h = Header::request(opcode, 1, ObjectId { inode: 7, index: 0 });
        if replica {
            h.flags = Flags(h.flags.0 | Flags::REPLICA);
        }
        h
    }

    #[test]
    fn data_clients_do_io_but_neither_remove_nor_snapshot_nor_replicate() {
        let data = Caps::DATA;
        for op in [
            Opcode::Read,
            Opcode::Write,
            Opcode::Trim,
            Opcode::Flush,
            Opcode::Call,
        ] {
            assert!(data.permits(&header(op, false)), "{op:?}");
        }
        for op in [
            Opcode::Purge,
            Opcode::Fence,
            Opcode::List,
            Opcode::Pull,
            Opcode::Push,
        ] {
            assert!(!data.permits(&header(op, false)), "{op:?}");
        }
        assert!(!data.permits(&header(Opcode::Write, true)), "replica write");
        assert!(Caps::ADMIN.permits(&header(Opcode::Purge, false)));
        assert!(!Caps::ADMIN.permits(&header(Opcode::Push, false)));
        assert!(Caps::OSD.permits(&header(Opcode::Write, true)));
        assert!(!Caps::default().permits(&header(Opcode::Read, false)));
    }
}
