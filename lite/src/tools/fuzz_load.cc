// fuzz_load: the sanitizer job's driver (./build.sh asan). Loads every .ms file named on the command line (or listed,
// one path a line, in files given as @LIST), runs each that loads once on zero inputs (dynamic dims as 1 or 2), and
// counts the outcomes (a model whose planned activations exceed 256 MiB is loaded and planned but not run: at -O0
// under the sanitizers a mutated pad's 2^20-column planes took a minute). A refusal (lite::Error) is the expected
// answer to a bad file; a crash, a hang or a sanitizer report is a bug, and ends the process with a non-zero status.
// Prints one summary line. --precision=MODE (a Context::precision_mode, e.g. preferred_bf16) applies to the files
// after it: the bf16 kernels under the sanitizers; --threads=N (default 1) the thread count of the files after it: the
// kernels' threaded splits under the sanitizers. --trace writes each file's path to stderr before it is probed, so
// a run that dies names the file that killed it. Every run is profiled, so each kernel's Implementation() (the names
// Model::LastProfile reports) runs under the sanitizers too.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "lite/errors.h"
#include "lite/model.h"

namespace {

struct Counts {
  int files = 0, refused_at_load = 0, ran = 0, refused_at_run = 0, not_run_large = 0;
};

void Probe(const std::string& path, const lite::Context& context, bool trace, Counts& counts) {
  if (trace) {
    std::fprintf(stderr, "probe: %s (precision %s, threads %d)\n", path.c_str(),
                 context.precision_mode.empty() ? "default" : context.precision_mode.c_str(), context.thread_num);
    std::fflush(stderr);
  }
  ++counts.files;
  lite::Model model;
  try {
    model.BuildFromFile(path, context);
  } catch (const lite::Error&) {
    ++counts.refused_at_load;
    return;
  }
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<lite::TensorView> inputs;
  try {
    bool dynamic = false;
    for (const lite::TensorInfo& info : model.GetInputs()) {
      lite::TensorView v;
      v.dtype = info.dtype;
      size_t numel = 1;
      for (int64_t d : info.shape) {
        dynamic |= d < 0;
        const int64_t dim = d < 0 ? 2 : d;
        v.shape.push_back(dim);
        numel *= static_cast<size_t>(dim);
        if (numel > (size_t(1) << 20)) throw lite::InvalidArgument("input too large for the fuzz run");
      }
      buffers.emplace_back(numel * 8 + 8, 0);   // zeros; 8 bytes per element covers every dtype
      v.data = buffers.back().data();
      inputs.push_back(v);
    }
    if (dynamic) {
      std::vector<lite::Shape> shapes;
      for (const lite::TensorView& v : inputs) shapes.push_back(v.shape);
      model.Resize(shapes);   // planned now, so the arena's size is known before running
    }
    if (model.ArenaBytes() > (size_t(256) << 20)) {
      ++counts.not_run_large;
      return;
    }
    model.SetProfiling(true);   // each node's Implementation() is asked right after it runs
    model.Predict(inputs);
    ++counts.ran;
  } catch (const lite::Error&) {
    ++counts.refused_at_run;
  } catch (const std::bad_alloc&) {
    ++counts.refused_at_run;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fuzz_load [--trace] [--precision=MODE] [--threads=N] FILE.ms ... | @LIST\n");
    return 2;
  }
  Counts counts;
  lite::Context context;
  const std::string precision_flag = "--precision=", threads_flag = "--threads=";
  bool trace = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--trace") {
      trace = true;
    } else if (arg.compare(0, precision_flag.size(), precision_flag) == 0) {
      context.precision_mode = arg.substr(precision_flag.size());
    } else if (arg.compare(0, threads_flag.size(), threads_flag) == 0) {
      const int n = std::atoi(arg.c_str() + threads_flag.size());
      if (n < 1 || n > 64) {
        std::fprintf(stderr, "fuzz_load: --threads wants 1 to 64, not '%s'\n", arg.c_str() + threads_flag.size());
        return 2;
      }
      context.thread_num = n;
    } else if (!arg.empty() && arg[0] == '@') {
      std::ifstream list(arg.substr(1));
      for (std::string line; std::getline(list, line);)
        if (!line.empty()) Probe(line, context, trace, counts);
    } else {
      Probe(arg, context, trace, counts);
    }
  }
  std::printf("fuzz_load: %d files, %d refused at load, %d ran, %d refused at run, %d not run (activations over "
              "256 MiB)\n",
              counts.files, counts.refused_at_load, counts.ran, counts.refused_at_run, counts.not_run_large);
  return 0;
}
