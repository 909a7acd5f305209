// The Docker Engine API client and the docker backend's errors: what a user
// sees when the daemon is down, the image is missing or the runtime unknown.
#include <gtest/gtest.h>

#include <string>

#include "backends.h"
#include "docker/engine.h"
#include "sandbox/docker.h"
#include "test_util.h"

namespace sandbox::testing {
namespace {

TEST(DockerEngineTest, ComparesApiVersionsNumerically) {
  EXPECT_LT(docker::CompareApiVersions("1.41", "1.47"), 0);
  EXPECT_LT(docker::CompareApiVersions("1.9", "1.41"), 0);
  EXPECT_EQ(docker::CompareApiVersions("1.41", "1.41"), 0);
  EXPECT_GT(docker::CompareApiVersions("2.0", "1.47"), 0);
  EXPECT_LT(docker::CompareApiVersions("junk", "1.41"), 0);
}

TEST(DockerEngineTest, ADaemonThatIsNotThereIsUnavailableWithAHint) {
  TempDir dir;
  const std::string host = "unix://" + dir.Join("no-docker.sock");
  auto engine = docker::Engine::Connect(host);
  ASSERT_FALSE(engine);
  EXPECT_EQ(engine.error().code(), Error::Code::Unavailable);
  EXPECT_TRUE(engine.error().message().starts_with("cannot reach the Docker daemon at " + host))
      << engine.error().message();
  EXPECT_NE(engine.error().message().find("is dockerd running?"), std::string::npos);
  DockerOptions options;
  options.workspace = dir.path();
  options.docker_host = host;
  auto made = NewDockerSandbox(options);
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code(), Error::Code::Unavailable);
  EXPECT_EQ(DockerUnavailableReason("", host), engine.error().message());
}

TEST(DockerEngineTest, RefusesAnUnknownDockerHostScheme) {
  auto engine = docker::Engine::Connect("ssh://somewhere");
  ASSERT_FALSE(engine);
  EXPECT_EQ(engine.error().code(), Error::Code::InvalidArgument);
  EXPECT_EQ(engine.error().message(),
            "DOCKER_HOST 'ssh://somewhere': only unix:///path/to/docker.sock and "
            "tcp://host:port are supported");
}

class DockerDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override { SANDBOX_SKIP_UNLESS_AVAILABLE("docker"); }
  TempDir dir_;
};

TEST_F(DockerDaemonTest, NegotiatesAnApiVersionInRange) {
  auto engine = docker::Engine::Connect();
  ASSERT_TRUE(engine) << engine.error().ToString();
  EXPECT_GE(docker::CompareApiVersions(engine->api_version(), docker::kMinApiVersion), 0);
  EXPECT_LE(docker::CompareApiVersions(engine->api_version(), docker::kMaxApiVersion), 0);
  auto version = engine->Request("GET", "/version");
  ASSERT_TRUE(version) << version.error().ToString();
  EXPECT_EQ(version->status, 200);
}

TEST_F(DockerDaemonTest, AMissingImageIsNotFoundAndSaysHowToBuildOne) {
  DockerOptions options;
  options.workspace = dir_.path();
  options.agent_path = ContainerAgentPath();
  options.image = "sandbox-no-such-image:" + UniqueMarker();
  auto made = NewDockerSandbox(options);
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code(), Error::Code::NotFound);
  EXPECT_EQ(made.error().message(),
            "image '" + options.image +
                "' not found in the Docker daemon: build it with `sandbox image build` (or pass "
                "--image NAME of an image the daemon has)");
}

TEST_F(DockerDaemonTest, AnUnknownRuntimeIsUnavailableAndNeverFallsBackToRunc) {
  // The runtime check comes before the image is needed.
  ASSERT_TRUE(FindBackend("docker").make(dir_.path()));
  DockerOptions options;
  options.workspace = dir_.path();
  options.agent_path = ContainerAgentPath();
  options.runtime = "no-such-runtime";
  auto made = NewGvisorSandbox(options);
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code(), Error::Code::Unavailable);
  EXPECT_NE(made.error().message().find("the Docker daemon does not know the runtime "
                                        "'no-such-runtime'"),
            std::string::npos)
      << made.error().message();
  EXPECT_NE(DockerUnavailableReason("no-such-runtime").find("has no runtime 'no-such-runtime'"),
            std::string::npos);
}

TEST_F(DockerDaemonTest, TheRuncRuntimeUnderTheGvisorNameIsRefused) {
  // A runtime that is really runc must not pass for a kernel boundary.
  ASSERT_TRUE(FindBackend("docker").make(dir_.path()));
  DockerOptions options;
  options.workspace = dir_.path();
  options.agent_path = ContainerAgentPath();
  options.runtime = "runc";
  auto made = NewGvisorSandbox(options);
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code(), Error::Code::InsufficientIsolation);
  EXPECT_NE(made.error().message().find("the container runs on the host's kernel"),
            std::string::npos)
      << made.error().message();
}

}  // namespace
}  // namespace sandbox::testing
