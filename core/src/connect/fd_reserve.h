// The listeners' reserved descriptor (issue 32): one /dev/null descriptor held while any listen
// comm lives, so that a listener out of descriptors (accept4 failing with EMFILE/ENFILE) can still
// take one connection from its backlog long enough to tell the connector why, instead of leaving it
// to wait out its SLUICE_CONNECT_TIMEOUT_MS for an answer that never comes (the kernel completed
// its TCP handshake in the backlog) and then blame the network.
#pragma once

#include <string>

#include "sluice/core/base/status.h"

namespace sluice {

// Counts one more user (a listen comm), opening the descriptor for the first; `what` names the
// call in the error (EMFILE/ENFILE: fd_census.h's message).
Status fd_reserve_take(const std::string& what);
// One user fewer; the last one closes the descriptor.
void fd_reserve_give();

// accept4 on `listen_fd` failed with EMFILE/ENFILE (`err`): the Status that fails this accept call
// (the limit named, fd_census.h), after the reserved descriptor made room for the oldest connection
// in the backlog, which got a failure notice (wire.h) naming this process's limit and was closed;
// the descriptor is then taken back. `dev` and `where` (the listening address) name the listener.
Status refuse_out_of_fds(int listen_fd, const std::string& dev, const std::string& where, int err);

}  // namespace sluice
