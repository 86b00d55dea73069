// Compiled into the shared SDK library only (libmslite.so): the library's own version, set by CMake.
#include "lite/version.h"

namespace lite {

const char* Version() { return MSLITE_VERSION; }

}  // namespace lite
