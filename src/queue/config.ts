import { z } from 'zod';

export const redisSchema = z.strictObject({
  url: z.string().default('redis://127.0.0.1:6379'),
  /** Key prefix of every queue; wrap in {braces} for Redis Cluster hash tags. */
  prefix: z.string().min(1).default('memory-warden'),
});

export const workerSchema = z.strictObject({
  timezone: z.string().default('UTC'),
});

export type RedisConfig = z.infer<typeof redisSchema>;
export type WorkerConfig = z.infer<typeof workerSchema>;
