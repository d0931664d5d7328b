// Closing a TCP socket that still holds unread bytes makes the kernel send a reset instead of a
// FIN, and the peer reads a reset as a crash ("reset the connection"). Every socket Sluice closes
// on purpose (a comm's own socket after its goodbye, a peer link after its last end, a handshake
// the listener drops) therefore reads what the peer sent first. One function, used by all three.
#pragma once

namespace sluice {

// Reads and discards what `fd` holds, without blocking: at most kDrainRounds reads of 4 KiB, so a
// peer that keeps sending cannot hold the caller. Returns the bytes read. fd < 0 does nothing.
inline constexpr int kDrainRounds = 16;
long drain_unread(int fd);

}  // namespace sluice
