// Built only in ThreadSanitizer builds: an unsynchronised counter that TSan
// must report, proving the thread sanitizer run is live.
#include <cstdio>
#include <thread>

int main() {
  int counter = 0;
  std::thread t([&] {
    for (int i = 0; i < 1000; ++i) counter = counter + 1;  // deliberate race
  });
  for (int i = 0; i < 1000; ++i) counter = counter + 1;
  t.join();
  std::printf("canary: counter=%d\n", counter);
  return 0;
}
