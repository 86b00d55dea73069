// Runs a model through the installed SDK: one Model, then a ModelParallelRunner of 2 workers fed from 4 threads;
// writes the Model's output (raw float32) and checks the runner's equal it. Usage: sdk_user MODEL INPUT OUTPUT
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <thread>
#include <vector>

#include "lite/errors.h"
#include "lite/model.h"
#include "lite/model_parallel_runner.h"
#include "lite/version.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: sdk_user MODEL INPUT OUTPUT\n";
    return 2;
  }
  std::ifstream in(argv[2], std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    lite::Model model;
    model.BuildFromFile(argv[1], lite::Context{"cpu", 1});
    lite::TensorInfo input = model.GetInputs().at(0);
    lite::Shape shape = input.shape;
    shape[0] = static_cast<int64_t>(bytes.size() / sizeof(float)) / (shape[1] * shape[2] * shape[3]);
    const lite::TensorView view{lite::DataType::kFloat32, shape, bytes.data()};
    const std::vector<lite::Tensor> out = model.Predict({view});

    lite::ModelParallelRunner runner;
    runner.Init(argv[1], lite::RunnerConfig{lite::Context{"cpu", 1}, 2});
    std::vector<int> same(4, 0);
    std::vector<std::thread> clients;
    for (int c = 0; c < 4; ++c)
      clients.emplace_back([&, c] {
        const std::vector<lite::Tensor> r = runner.Predict({view});
        same[c] = r[0].nbytes == out[0].nbytes && std::memcmp(r[0].data(), out[0].data(), out[0].nbytes) == 0;
      });
    for (auto& t : clients) t.join();
    for (int s : same)
      if (!s) {
        std::cerr << "runner result differs from the model's\n";
        return 1;
      }
    std::ofstream(argv[3], std::ios::binary).write(static_cast<const char*>(out[0].data()), out[0].nbytes);
    try {
      lite::Model broken;
      broken.BuildFromFile(argv[2]);   // not a model
      std::cerr << "a non-model file was accepted\n";
      return 1;
    } catch (const lite::ModelFormatError& e) {
      std::cout << "refused: " << e.what() << "\n";
    }
    std::cout << "lite " << lite::Version() << "\n";
    std::cout << "ok " << runner.WorkersNum() << " workers, output " << out[0].info.name << "\n";
    return 0;
  } catch (const lite::Error& e) {
    std::cerr << "lite error: " << e.what() << "\n";
    return 1;
  }
}
