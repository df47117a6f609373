BEGIN TRANSACTION;
CREATE TABLE floodgate_blob_store (
	id INTEGER NOT NULL, 
	catalog_id VARCHAR(32) NOT NULL, 
	blob_dir VARCHAR, 
	since FLOAT NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO "floodgate_blob_store" VALUES(1,'00000000000000000000000000000000','@BLOB_DIR@',0.0);
CREATE TABLE floodgate_blob_writes (
	path VARCHAR NOT NULL, 
	topic VARCHAR NOT NULL, 
	partition INTEGER NOT NULL, 
	start_offset BIGINT NOT NULL, 
	end_offset BIGINT NOT NULL, 
	since FLOAT NOT NULL, 
	PRIMARY KEY (path)
);
CREATE TABLE floodgate_blobs (
	id INTEGER NOT NULL, 
	topic VARCHAR NOT NULL, 
	partition INTEGER NOT NULL, 
	start_offset BIGINT NOT NULL, 
	end_offset BIGINT NOT NULL, 
	path VARCHAR NOT NULL, 
	bytes BIGINT NOT NULL, 
	tuples BIGINT NOT NULL, 
	created FLOAT NOT NULL, 
	sha256 VARCHAR(64), 
	first_offset BIGINT, 
	last_offset BIGINT, 
	PRIMARY KEY (id)
);
INSERT INTO "floodgate_blobs" VALUES(1,'flights',3,100,110,'@BLOB_DIR@/flights-3-00000000000000000100-00000000000000000110.avro',1040,9,0.0,'891bc7e0952c29ce58f2a1d3ceee7d1e1289d4a861cf95e50d7900854e28502c',100,109);
INSERT INTO "floodgate_blobs" VALUES(2,'flights',3,110,120,'@BLOB_DIR@/flights-3-00000000000000000110-00000000000000000120.avro',1011,9,0.0,'fe0dc635b2f1911a2a2e61c46b138a28ab6439813389e5959863075cea3aa58f',110,118);
CREATE UNIQUE INDEX floodgate_blobs_chain ON floodgate_blobs (topic, partition, start_offset);
COMMIT;
