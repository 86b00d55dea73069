// The runtime's version, and the .ms format version it reads.
#pragma once

namespace lite {

const char* Version();   // e.g. "0.1.0"

}  // namespace lite
