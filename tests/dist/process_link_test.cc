// dist/process_link under mpirun (dist_mpi_tests_np2; alone, a world of one, it has no one to talk to): the
// leader's messages reach every worker whole and in the order sent — an empty one, one of 1 MiB (past the
// eager limits of MPI's transports, so the rendezvous path) and a small one — with their tags, Shutdown comes
// once however often release_workers is called, and a worker's answer reaches the leader.
#include <gtest/gtest.h>

#include <numeric>

#include "dist/mpi_bootstrap.h"
#include "dist/process_link.h"

namespace rill::dist {
namespace {

std::vector<uint8_t> pattern(size_t n, int salt) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t((i * 131 + size_t(salt) * 7) >> 3);
  return v;
}

TEST(ProcessLink, MessagesArriveWholeAndInOrder) {
  auto world = mpi_init();  // the program's environment has initialised MPI; this returns the same world
  ASSERT_TRUE(world.ok()) << world.status().to_string();
  auto made = ProcessLink::make(*world);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  ProcessLink& link = **made;
  EXPECT_EQ(link.process(), world->rank);
  EXPECT_EQ(link.n_processes(), world->size);
  if (world->size == 1) GTEST_SKIP() << "a world of one has no worker processes (run under mpirun -np 2)";

  const std::vector<uint8_t> big = pattern(1 << 20, 1), small = pattern(17, 2);
  if (link.is_leader()) {
    ASSERT_TRUE(link.send_to_workers(LinkTag::Options, {}).ok());
    ASSERT_TRUE(link.send_to_workers(LinkTag::Step, big).ok());
    ASSERT_TRUE(link.send_to_workers(LinkTag::Step, small).ok());
    link.release_workers();
    link.release_workers();  // once only: the worker's next message from us would be a second Shutdown
    for (int p = 1; p < link.n_processes(); ++p) {
      auto answer = link.receive(p);
      ASSERT_TRUE(answer.ok()) << answer.status().to_string();
      EXPECT_EQ(answer->tag, LinkTag::Report);
      EXPECT_EQ(answer->bytes, pattern(size_t(p), 3));
    }
    // Each worker has sent its last message; a last Step from us tells them nothing more comes after it.
    ASSERT_TRUE(link.send_to_workers(LinkTag::Step, small).ok());
  } else {
    const std::vector<std::pair<LinkTag, std::vector<uint8_t>>> want = {
        {LinkTag::Options, {}}, {LinkTag::Step, big}, {LinkTag::Step, small}, {LinkTag::Shutdown, {}}};
    for (const auto& [tag, bytes] : want) {
      auto m = link.receive(0);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      EXPECT_EQ(link_tag_name(m->tag), std::string(link_tag_name(tag)));
      EXPECT_EQ(m->bytes.size(), bytes.size());
      EXPECT_TRUE(m->bytes == bytes) << link_tag_name(tag) << " message of " << bytes.size()
                                     << " bytes differs";
    }
    ASSERT_TRUE(link.send(0, LinkTag::Report, pattern(size_t(link.process()), 3)).ok());
    // The message after Shutdown is the final Step, not a second Shutdown.
    auto last = link.receive(0);
    ASSERT_TRUE(last.ok()) << last.status().to_string();
    EXPECT_EQ(link_tag_name(last->tag), std::string("step"));
  }
}

}  // namespace
}  // namespace rill::dist
