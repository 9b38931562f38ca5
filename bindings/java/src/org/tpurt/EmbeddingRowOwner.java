package org.tpurt;

/** Where an embedding row lives: the global core holding its shard (task core / cores per task) and its row there. */
public record EmbeddingRowOwner(int core, long shardRow) {}
