#include "sluice/core/base/version.h"

#include "sluice/revision.h"  // generated into the build tree

namespace sluice {

const char* version() {
  return SLUICE_VERSION;
}

const char* revision() {
  return SLUICE_REVISION;
}

const char* version_line() {
  return "Sluice " SLUICE_VERSION " (" SLUICE_REVISION ")";
}

}  // namespace sluice
