// index/catalog.h and index/object_writer.h: the open-or-create-and-publish
// of a named index, the descriptor open/verify, and the writer of new
// objects that gives back what a change did not publish.
#include "index/catalog.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <memory>
#include <string_view>

#include "dmidx/cluster.h"
#include "index/object_writer.h"
#include "lib/fabric/op.h"
#include "lib/runtime/compute_node.h"
#include "testing/injection.h"
#include "testing/local_cluster.h"

namespace dmidx {
namespace {

using fabric::RemoteAddress;
using runtime::ContextImpl;

class CatalogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = testing::OpenCluster(false);
    ASSERT_NE(cluster_, nullptr);
    client_ = testing::NewClient(*cluster_);
    ASSERT_TRUE(client_->NewBlockingContext(&context_).ok());
    auto slot = runtime::ComputeNode::Of(*client_).CatalogWord("catalog-test", true);
    ASSERT_TRUE(slot.ok());
    slot_ = *slot;
  }
  ContextImpl& ctx() { return ContextImpl::From(*context_); }
  uint64_t SlotValue() {
    uint64_t* word = *ctx().arena().Words(1);
    const fabric::Op read = fabric::Op::Read(slot_, word, 8);
    EXPECT_TRUE(ctx().Execute(slot_.node(), {&read, 1}).ok());
    return *word;
  }

  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<Context> context_;
  RemoteAddress slot_;
};

TEST_F(CatalogTest, FailedCreationPublishesNothingAndGivesItsObjectsBack) {
  RemoteAddress made_first;
  auto failed = index::OpenOrCreate(
      ctx(), slot_, [&](ContextImpl& c, index::MadeObjects* made) -> StatusOr<RemoteAddress> {
        DMIDX_ASSIGN_OR_RETURN(made_first, made->Allocate(c, 64, 0));
        return Status::ResourceExhausted("no room");
      });
  EXPECT_TRUE(failed.status().IsResourceExhausted());
  EXPECT_EQ(SlotValue(), 0u);
  EXPECT_EQ(ctx().allocator().free_objects(), 1u) << "the object went back to the allocator";
  // The next creation gets the same object back and publishes it.
  auto created = index::OpenOrCreate(
      ctx(), slot_, [&](ContextImpl& c, index::MadeObjects* made) -> StatusOr<RemoteAddress> {
        return made->Allocate(c, 64, 0);
      });
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(*created, made_first);
  EXPECT_EQ(SlotValue(), made_first.raw());
  EXPECT_EQ(ctx().allocator().free_objects(), 0u);
}

TEST_F(CatalogTest, AnExistingEntryIsOpenedWithoutCreating) {
  auto created = index::OpenOrCreate(
      ctx(), slot_, [&](ContextImpl& c, index::MadeObjects* made) -> StatusOr<RemoteAddress> {
        return made->Allocate(c, 64);
      });
  ASSERT_TRUE(created.ok());
  int creations = 0;
  auto opened = index::OpenOrCreate(
      ctx(), slot_, [&](ContextImpl& c, index::MadeObjects* made) -> StatusOr<RemoteAddress> {
        ++creations;
        return made->Allocate(c, 64);
      });
  ASSERT_TRUE(opened.ok());
  EXPECT_EQ(*opened, *created);
  EXPECT_EQ(creations, 0);
}

// A creator that loses the publish race returns the winner's descriptor
// and frees its own objects: played by publishing another descriptor into
// the slot from inside the creation, after the slot was read as empty.
TEST_F(CatalogTest, TheLoserOfThePublishRaceFreesWhatItMadeAndOpensTheWinner) {
  const RemoteAddress winner = *ctx().allocator().Allocate(64);
  auto opened = index::OpenOrCreate(
      ctx(), slot_, [&](ContextImpl& c, index::MadeObjects* made) -> StatusOr<RemoteAddress> {
        uint64_t* word = *c.arena().Words(1);
        *word = winner.raw();
        const fabric::Op publish = fabric::Op::Write(slot_, word, 8);
        DMIDX_RETURN_IF_ERROR(c.Execute(slot_.node(), {&publish, 1}));
        return made->Allocate(c, 64);
      });
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(*opened, winner);
  EXPECT_EQ(SlotValue(), winner.raw());
  EXPECT_EQ(ctx().allocator().free_objects(), 1u) << "the loser's object went back";
}

// index::OpenDescriptor: a descriptor made once, found again by the next
// Open, and refused with an error naming the index when it is of another
// kind (its magic) or has other keys.
TEST_F(CatalogTest, OpenDescriptorChecksMagicAndKeyBytes) {
  constexpr uint64_t kMagic = 0x5453455443534544ull;
  int created = 0;
  auto create = [&](ContextImpl& creating, index::MadeObjects* made) -> StatusOr<RemoteAddress> {
    ++created;
    DMIDX_ASSIGN_OR_RETURN(RemoteAddress address,
                           made->Allocate(creating, index::kDescriptorBytes));
    std::array<uint64_t, index::kDescriptorBytes / 8> image{};
    image[0] = kMagic;
    image[1] = 8;  // key bytes
    image[2] = 77;
    DMIDX_RETURN_IF_ERROR(index::WriteDescriptor(creating, address, image.data()));
    return address;
  };
  auto first = index::OpenDescriptor(*client_, {"test", "test index", "t", kMagic, 8}, create);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto again = index::OpenDescriptor(*client_, {"test", "test index", "t", kMagic, 8}, create);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(created, 1);
  EXPECT_EQ(again->address, first->address);
  EXPECT_EQ((again->As<std::array<uint64_t, 8>>()[2]), 77u);

  auto keys = index::OpenDescriptor(*client_, {"test", "test index", "t", kMagic, 16}, create);
  EXPECT_TRUE(keys.status().IsInvalidArgument()) << keys.status().ToString();
  EXPECT_NE(keys.status().message().find("test index 't' exists with 8-byte keys, not 16"),
            std::string_view::npos)
      << keys.status().ToString();
  auto kind = index::OpenDescriptor(*client_, {"test", "other index", "t", kMagic + 1, 8}, create);
  EXPECT_EQ(kind.status().code(), StatusCode::kFailedPrecondition) << kind.status().ToString();
  EXPECT_NE(kind.status().message().find("'test/t' does not point at a other index"),
            std::string_view::npos)
      << kind.status().ToString();
  EXPECT_EQ(created, 1);
}

// index::ObjectWriter: objects made for a change that never published them
// go back to the allocator, whether their batch failed or the change gave
// up later; kept ones stay.
TEST_F(CatalogTest, ObjectWriterFreesWhatItMadeUnlessKept) {
  auto write_three = [&](index::ObjectWriter& writer) {
    for (int i = 0; i < 3; ++i) {
      auto address = writer.Allocate(128, uint16_t{0});
      ASSERT_TRUE(address.ok()) << address.status().ToString();
      auto image = writer.Buffer(128);
      ASSERT_TRUE(image.ok()) << image.status().ToString();
      std::memset(*image, i + 1, 128);
      writer.Write(*address, *image, 128);
    }
  };
  const uint64_t free_before = ctx().allocator().free_objects();
  {
    index::ObjectWriter writer(ctx());
    write_three(writer);
    ASSERT_TRUE(testing::Faults(*cluster_).FailNextBatches(0, 1).ok());
    EXPECT_FALSE(writer.Flush().ok());
    // Freed by the failed flush, before the writer goes.
    EXPECT_EQ(ctx().allocator().free_objects(), free_before + 3);
  }
  EXPECT_EQ(ctx().allocator().free_objects(), free_before + 3);
  {
    index::ObjectWriter writer(ctx());
    write_three(writer);  // reuses the three
    EXPECT_TRUE(writer.Flush().ok());
    EXPECT_EQ(ctx().allocator().free_objects(), free_before);
  }  // never published: freed
  EXPECT_EQ(ctx().allocator().free_objects(), free_before + 3);
  {
    index::ObjectWriter writer(ctx());
    write_three(writer);
    EXPECT_TRUE(writer.Flush().ok());
    writer.Keep();
  }
  EXPECT_EQ(ctx().allocator().free_objects(), free_before);
}

}  // namespace
}  // namespace dmidx
