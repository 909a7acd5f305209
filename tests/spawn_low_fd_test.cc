// Regression test: a host program whose fds 0..3 are partly closed gets
// directory fds numbered 0..3 from the fence; Spawn must still chdir to the
// right directory (it once did fchdir after moving stdio onto 0..3, so a cwd
// fd numbered 3 was replaced by the status pipe: "chdir: Not a directory").
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "sandbox/local.h"
#include "test_util.h"

namespace sandbox::testing {
namespace {

// Runs `body` in a forked child (fd changes stay there); its exit status.
template <class Body>
int InChild(Body body) {
  pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(SpawnLowFdTest, SessionsAndExecWorkWhenTheSandboxsFdsAreNumberedThree) {
  TempDir workspace;
  WriteHostFile(workspace.Join("marker"), "x");
  int status = InChild([&] {
    dup2(2, 3);  // hold number 3 while the sandbox opens its own fds
    LocalOptions options;
    options.root = workspace.path();
    auto sandbox = NewLocalSandbox(options);
    if (!sandbox) return 10;
    close(3);  // the next directory fd opened from the root gets number 3
    auto* sessioner = As<Sessioner>(**sandbox);
    auto session = sessioner->NewSession({});
    if (!session) return 11;
    auto listed = (*session)->Exec({}, {.path = "ls"});
    if (!listed || listed->stdout_data != "marker\n") return 12;
    auto exec = (*sandbox)->Exec({}, {.path = "ls"});
    if (!exec || exec->stdout_data != "marker\n") return 13;
    return 0;
  });
  EXPECT_EQ(status, 0) << "10: no sandbox, 11: no session, 12: session ls, 13: Exec ls";
}

}  // namespace
}  // namespace sandbox::testing
