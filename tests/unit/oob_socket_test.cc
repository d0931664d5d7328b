// The text of an out-of-band address (core/src/connect/oob_socket.h, sockaddr_text): what
// sockaddr_to_string prints, with an IPv6 scope's interface name kept a second instead of read by
// if_indextoname on each call.
#include "connect/oob_socket.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cstring>
#include <string>

#include "sluice/core/base/net_addr.h"

namespace sluice {
namespace {

sockaddr_storage v6(const char* text, uint32_t scope, uint16_t port) {
  sockaddr_storage sa{};
  auto& s = reinterpret_cast<sockaddr_in6&>(sa);
  s.sin6_family = AF_INET6;
  s.sin6_port = htons(port);
  s.sin6_scope_id = scope;
  EXPECT_EQ(inet_pton(AF_INET6, text, &s.sin6_addr), 1);
  return sa;
}

TEST(SockaddrText, SameTextAsSockaddrToStringWithTheScopeNamed) {
  const uint32_t lo = if_nametoindex("lo");
  ASSERT_NE(lo, 0u) << "no loopback interface";
  const sockaddr_storage a = v6("fe80::1", lo, 4791);
  EXPECT_EQ(sockaddr_text(a), "[fe80::1%lo]:4791");
  EXPECT_EQ(sockaddr_text(a), sockaddr_to_string(a));
  EXPECT_EQ(sockaddr_text(a), "[fe80::1%lo]:4791") << "kept: the same text again";
}

TEST(SockaddrText, AnIndexWithNoInterfacePrintsItsNumber) {
  const sockaddr_storage a = v6("fe80::2", 999999, 1);
  EXPECT_EQ(sockaddr_text(a), "[fe80::2%999999]:1");
}

TEST(SockaddrText, NoScopeAndIpv4AreUnchanged) {
  EXPECT_EQ(sockaddr_text(v6("2001:db8::5", 0, 80)), "[2001:db8::5]:80");
  sockaddr_storage sa{};
  auto& s = reinterpret_cast<sockaddr_in&>(sa);
  s.sin_family = AF_INET;
  s.sin_port = htons(1234);
  ASSERT_EQ(inet_pton(AF_INET, "10.1.2.3", &s.sin_addr), 1);
  EXPECT_EQ(sockaddr_text(sa), "10.1.2.3:1234");
}

// Indexes with no interface print as numbers and are never kept, so they never take a kept
// name's place nor get one.
TEST(SockaddrText, IndexesWithoutAnInterfaceNeverTakeAKeptName) {
  const uint32_t lo = if_nametoindex("lo");
  ASSERT_NE(lo, 0u);
  for (int round = 0; round < 3; ++round) {
    for (uint32_t k = 0; k < 8; ++k) {
      const uint32_t idx = 900000 + k;  // no such interfaces: printed as numbers, never kept
      EXPECT_EQ(sockaddr_text(v6("fe80::3", idx, 7)), "[fe80::3%" + std::to_string(idx) + "]:7");
    }
    EXPECT_EQ(sockaddr_text(v6("fe80::3", lo, 7)), "[fe80::3%lo]:7");
  }
}

}  // namespace
}  // namespace sluice
