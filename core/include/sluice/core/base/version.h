// The version and source revision of this build (cmake/SluiceVersion.cmake).
#pragma once

namespace sluice {

// "0.1.0"
const char* version();
// "git <describe>" (e.g. "git cf7ecaf-dirty"), or "unknown" when built without git metadata.
const char* revision();
// "Sluice 0.1.0 (git cf7ecaf)": the plugin's first INFO line and `sluice-info --version`.
const char* version_line();

}  // namespace sluice
