// --compare-raw: perftest's ib_write_bw / ib_write_lat on the same device pair, with the same
// size and iteration count, run as server (peer side) + client (initiator side).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "sluice_bench.h"

namespace bench {

namespace {

std::vector<std::string> split_ws(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> t;
  std::string w;
  while (in >> w) t.push_back(w);
  return t;
}

bool is_number(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  strtod(s.c_str(), &end);
  return end && *end == '\0';
}

// The first all-numeric row after the header line containing `key`.
bool find_row(const std::string& out, const char* key, std::string* header,
              std::vector<double>* row) {
  std::istringstream in(out);
  std::string line;
  bool seen = false;
  while (std::getline(in, line)) {
    if (!seen) {
      if (line.find(key) != std::string::npos) {
        seen = true;
        *header = line;
      }
      continue;
    }
    auto t = split_ws(line);
    if (t.size() < 3 || !is_number(t[0])) continue;
    row->clear();
    for (auto& x : t) {
      if (!is_number(x)) break;
      row->push_back(strtod(x.c_str(), nullptr));
    }
    return true;
  }
  return false;
}

std::string last_lines(const std::string& s, int n) {
  size_t pos = s.size();
  for (int i = 0; i < n && pos > 0; ++i) {
    size_t p = s.rfind('\n', pos - 1);
    if (p == std::string::npos) {
      pos = 0;
      break;
    }
    pos = p;
  }
  std::string t = s.substr(pos);
  for (auto& c : t)
    if (c == '\n') c = '|';
  return t;
}

std::vector<std::string> perftest_args(const char* tool, const Side& s, const Cmd& c) {
  // perftest refuses fewer than 5 iterations.
  const uint64_t iters = std::max<uint64_t>(c.iters, 5);
  std::vector<std::string> a = {tool, "-d", s.raw_dev, "-s", std::to_string(c.size), "-n"};
  a.push_back(std::to_string(iters));
  a.push_back("-p");
  a.push_back(std::to_string(c.raw_port));
  a.push_back("-F");
  if (s.raw_ib_port > 0) {
    a.push_back("-i");
    a.push_back(std::to_string(s.raw_ib_port));
  }
  if (c.gid_index >= 0) {
    a.push_back("-x");
    a.push_back(std::to_string(c.gid_index));
  }
  if (c.tx_depth > 0 && std::string(tool) == "ib_write_bw") {
    a.push_back("-t");
    a.push_back(std::to_string(c.tx_depth));
  }
  return a;
}

// True once something listens on TCP `port` on this machine (/proc/net/tcp{,6}, state 0A).
bool port_listening(int port) {
  char want[8];
  snprintf(want, sizeof want, ":%04X", port);
  for (const char* f : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(f);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      auto t = split_ws(line);
      if (t.size() > 3 && t[1].size() > 5 && t[1].compare(t[1].size() - 5, 5, want) == 0 &&
          t[3] == "0A")
        return true;
    }
  }
  return false;
}

template <class R, class Parse>
R run_client(Side& s, const Cmd& c, const std::string& peer, Parse parse, SideStats* wire) {
  R res;
  const char* tool = raw_tool(c.op);
  std::vector<std::string> args = perftest_args(tool, s, c);
  args.push_back(peer);
  Deadline dl(c.timeout_s, std::string("running ") + tool);
  // Tell the peer to start its server, wait until it listens.
  std::string ready = s.ch->recv_str(dl);
  if (ready != "ready") {
    res.error = ready;
  } else {
    WireCounter w0;
    if (c.flags & kCountWire) w0 = WireCounter::read(s.hw_dev, s.hw_port);
    CmdResult r;
    for (int attempt = 0; attempt < 5; ++attempt) {
      r = run_cmd(args, std::max(1.0, dl.left()));
      if (r.status == 0 || r.timed_out || r.out.find("Couldn't connect") == std::string::npos)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    if (c.flags & kCountWire) {
      WireCounter w1 = settle_and_read(s);
      wire->wire_valid = w0.ok && w1.ok && r.status == 0;
      wire->wire_pkts = w1.value - w0.value;
    }
    res = parse(r.out);
    if (!res.ok) {
      res.error = strf("%s client exited %d%s: %s", tool, r.status,
                       r.timed_out ? " (timed out)" : "", last_lines(r.out, 4).c_str());
    }
  }
  // The server's verdict (its exit status and output) comes back either way.
  s.ch->send_str("done", dl);
  std::string server = s.ch->recv_str(dl);
  if (!res.ok && !server.empty()) res.error += " | server: " + last_lines(server, 3);
  return res;
}

}  // namespace

RawBw parse_ib_write_bw(const std::string& out) {
  RawBw r;
  std::string header;
  std::vector<double> row;
  if (!find_row(out, "BW average", &header, &row) || row.size() < 5) {
    r.error = "no result line in ib_write_bw output";
    return r;
  }
  // perftest: MB/sec means 2^20 bytes per second; Gb/sec means 10^9 bits per second.
  double to_gbs = header.find("Gb/sec") != std::string::npos ? 0.125 : 1048576.0 / 1e9;
  r.peak_gbs = row[2] * to_gbs;
  r.avg_gbs = row[3] * to_gbs;
  r.mpps = row[4];
  r.ok = true;
  return r;
}

RawLat parse_ib_write_lat(const std::string& out) {
  RawLat r;
  std::string header;
  std::vector<double> row;
  if (!find_row(out, "t_typical", &header, &row) || row.size() < 6) {
    r.error = "no result line in ib_write_lat output";
    return r;
  }
  // #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
  r.min_us = row[2];
  r.max_us = row[3];
  r.typical_us = row[4];
  r.avg_us = row[5];
  r.p99_us = row.size() > 7 ? row[7] : 0;
  r.ok = true;
  return r;
}

const char* raw_tool(Op op) {
  switch (op) {
    case Op::kRawBw:
      return "ib_write_bw";
    case Op::kRawLat:
      return "ib_write_lat";
    case Op::kRawSendLat:
      return "ib_send_lat";
    default:
      fail("not a perftest command: %u", static_cast<unsigned>(op));
  }
}

SideStats raw_serve(Side& s, const Cmd& c) {
  const char* tool = raw_tool(c.op);
  SideStats st;
  WireCounter w0;
  if (c.flags & kCountWire) w0 = WireCounter::read(s.hw_dev, s.hw_port);
  Deadline dl(c.timeout_s, std::string("serving ") + tool);
  std::vector<std::string> args = perftest_args(tool, s, c);
  char path[] = "/tmp/sluice-bench-perftest-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) {
    s.ch->send_str(strf("cannot create a temporary file: %s", strerror(errno)), dl);
  }
  pid_t pid = fd < 0 ? -1 : fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> av;
    for (auto& a : args) av.push_back(const_cast<char*>(a.c_str()));
    av.push_back(nullptr);
    execvp(av[0], av.data());
    fprintf(stderr, "cannot run %s: %s\n", tool, strerror(errno));
    _exit(127);
  }
  if (fd >= 0) close(fd);
  int status = -1;
  bool exited = false;
  if (pid > 0) {
    // Ready once perftest's out-of-band socket listens (or it died trying).
    for (;;) {
      if (port_listening(c.raw_port)) break;
      int st;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        exited = true;
        status = st;
        break;
      }
      if (dl.expired()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    s.ch->send_str(exited ? strf("%s server exited before listening", tool) : "ready", dl);
  } else if (fd >= 0) {
    s.ch->send_str(strf("cannot fork: %s", strerror(errno)), dl);
  }
  (void)s.ch->recv_str(dl);  // client finished (or gave up)
  if (pid > 0 && !exited) {
    Deadline end(std::min(15.0, std::max(1.0, dl.left())), "waiting for the perftest server");
    for (;;) {
      int st;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        status = st;
        break;
      }
      if (end.expired()) {
        kill(-pid, SIGKILL);
        waitpid(pid, &st, 0);
        status = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (c.flags & kCountWire) {
    WireCounter w1 = settle_and_read(s);
    st.wire_valid = w0.ok && w1.ok && pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    st.wire_pkts = w1.value - w0.value;
  }
  std::string out;
  if (fd >= 0) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    out = ss.str();
    unlink(path);
  }
  s.ch->send_str(strf("[exit %d] ", WIFEXITED(status) ? WEXITSTATUS(status) : -1) + out, dl);
  return st;
}

RawBw raw_bw_client(Side& s, const Cmd& c, const std::string& peer, SideStats* wire) {
  return run_client<RawBw>(s, c, peer, parse_ib_write_bw, wire);
}

RawLat raw_lat_client(Side& s, const Cmd& c, const std::string& peer, SideStats* wire) {
  return run_client<RawLat>(s, c, peer, parse_ib_write_lat, wire);
}

WireCounter WireCounter::read(const std::string& dev, int port) {
  WireCounter w;
  if (dev.empty()) {
    w.source = "no device name";
    return w;
  }
  if (dev.find('+') != std::string::npos) {  // a fused device "a+b[:port]...": its members' sum
    w.ok = true;
    std::string sources;
    for (size_t at = 0; at <= dev.size();) {
      const size_t end = std::min(dev.find('+', at), dev.size());
      const std::string member = dev.substr(at, end - at);
      const size_t colon = member.find(':');
      const int mport = colon == std::string::npos ? 1 : atoi(member.c_str() + colon + 1);
      const WireCounter m = read(member.substr(0, colon), mport);
      if (!m.ok) return m;
      w.value += m.value;
      sources += (sources.empty() ? "" : " + ") + m.source;
      at = end + 1;
    }
    w.source = sources;
    return w;
  }
  std::string base =
      "/sys/class/infiniband/" + dev + "/ports/" + std::to_string(port > 0 ? port : 1);
  for (const char* f : {"/hw_counters/sent_pkts", "/counters/port_xmit_packets"}) {
    std::ifstream in(base + f);
    unsigned long long v = 0;
    if (in >> v) {
      w.ok = true;
      w.value = v;
      w.source = base + f;
      return w;
    }
  }
  w.source = "neither " + base + "/hw_counters/sent_pkts nor counters/port_xmit_packets readable";
  return w;
}

WireCounter settle_and_read(const Side& s) {
  // The last ACK of a phase may leave the device just after the completion that ended it.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return WireCounter::read(s.hw_dev, s.hw_port);
}

}  // namespace bench
