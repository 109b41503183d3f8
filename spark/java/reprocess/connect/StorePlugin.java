package reprocess.connect;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.Optional;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.MissingNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.EtagSource;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocatedFileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RemoteIterator;
import org.apache.hadoop.io.IOUtils;
import org.apache.hadoop.io.compress.CompressionCodec;
import org.apache.hadoop.io.compress.CompressionCodecFactory;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.hadoop.metadata.BlockMetaData;
import org.apache.parquet.hadoop.metadata.ColumnChunkMetaData;
import org.apache.parquet.hadoop.util.HadoopInputFile;
import org.apache.spark.SparkContext;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connect.planner.SparkConnectPlanner;
import org.apache.spark.sql.connect.plugin.RelationPlugin;
import org.apache.spark.sql.execution.LogicalRDD;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.storage.RDDInfo;

/**
 * The warehouse's store calls for a Spark Connect client, run in the server's driver JVM: a client has no JVM of
 * its own, so the calls {@code reprocess.storage.hadoop} makes through py4j on a driver of its own come here as a
 * relation of the Connect protocol (an extension whose type is {@link #TYPE_URL}, its value a JSON request), and
 * their answers go back as the relation's rows ({@code k}, {@code s}, {@code n}, {@code b}).
 *
 * <p>Every call goes through the Hadoop {@link FileSystem} of the server's Hadoop configuration, as the driver's
 * py4j calls do: the conditional creates of the commit and the lease ({@code fs.option.create.conditional.overwrite},
 * {@code ...overwrite.etag}), ETags, listings, deletes. A failed condition is an answer ({@code n = 0}), not an
 * error. Each request carries a nonce of the client's, so that the server's plan cache never answers a call with an
 * earlier call's rows.
 *
 * <p>Two requests are about the session's kept frames, not the store: {@code free} removes a client's local
 * checkpoints and their blocks when its run is done, and {@code kept} lists the RDDs the driver keeps blocks of
 * (see {@link #frames}).
 *
 * <p>Enabled by {@code spark.connect.extensions.relation.classes=reprocess.connect.StorePlugin} with this jar on
 * the driver's class path ({@code reprocess connect-server} sets both).
 */
public final class StorePlugin implements RelationPlugin {

  public static final String TYPE_URL = "type.googleapis.com/reprocess.StoreRequest";
  private static final String IF_ABSENT = "fs.option.create.conditional.overwrite";
  private static final String IF_MATCH = "fs.option.create.conditional.overwrite.etag";
  private static final String[] CONFLICTS = {
    "org.apache.hadoop.fs.FileAlreadyExistsException", "org.apache.hadoop.fs.s3a.RemoteFileChangedException"};
  // where the JVM throws when bytes do not decode (reprocess.storage.hadoop_fs._DECODERS)
  private static final String[] DECODERS = {"org.apache.hadoop.io.compress.", "java.util.zip.", "org.apache.parquet."};
  // the Parquet codecs Spark cannot decompress with the jars it ships
  // (reprocess.landing.contract.UNREADABLE_PARQUET_CODECS)
  private static final List<String> UNREADABLE_PARQUET_CODECS = List.of("BROTLI", "LZO");
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final StructType SCHEMA = new StructType()
      .add("k", DataTypes.StringType)
      .add("s", DataTypes.StringType)
      .add("n", DataTypes.LongType)
      .add("b", DataTypes.BinaryType);

  @Override
  public Optional<LogicalPlan> transform(byte[] relation, SparkConnectPlanner planner) {
    byte[][] any = parseAny(relation);
    if (any == null || !TYPE_URL.equals(new String(any[0], StandardCharsets.UTF_8))) {
      return Optional.empty(); // another plugin's relation
    }
    SparkSession session = planner.session();
    try {
      JsonNode request = JSON.readTree(any[1]);
      String op = request.path("op").asText();
      List<Row> rows = "free".equals(op) || "kept".equals(op)
          ? frames(planner, op, request)
          : handle(session.sparkContext().hadoopConfiguration(), request);
      return Optional.of(session.createDataFrame(rows, SCHEMA).logicalPlan());
    } catch (IOException e) {
      throw new UncheckedIOException(e.getClass().getName() + ": " + e.getMessage(), e);
    }
  }

  /**
   * The session's kept frames. {@code free}: the frames a client checkpointed ({@code localCheckpoint}), by the ids
   * of their cached relations ({@code ids}): each relation is removed from the session and its checkpoint's blocks
   * are removed from the executors, at once, where the relation's own release (when the client's object is
   * collected) only drops the reference, and the blocks stay until this JVM's garbage collector has collected the
   * RDD. A row per id: {@code freed} with the RDD's id, or {@code absent} (-1) for a relation the session no longer
   * holds. {@code kept}: a row per RDD the driver keeps blocks for (cached or checkpointed), its id, for a client
   * to check that nothing is left.
   */
  static List<Row> frames(SparkConnectPlanner planner, String op, JsonNode request) {
    List<Row> rows = new ArrayList<>();
    SparkContext sc = planner.session().sparkContext();
    if ("kept".equals(op)) {
      for (RDDInfo info : sc.getRDDStorageInfo()) {
        rows.add(row("rdd", info.name(), info.id()));
      }
      return rows;
    }
    for (JsonNode id : request.path("ids")) {
      Dataset<Row> df = planner.sessionHolder().removeCachedDataFrame(id.asText());
      if (df == null) {
        rows.add(row("absent", id.asText(), -1));
        continue;
      }
      LogicalPlan plan = df.queryExecution().analyzed();
      if (plan instanceof LogicalRDD) {
        int rdd = ((LogicalRDD) plan).rdd().id();
        sc.unpersistRDD(rdd, false);
        rows.add(row("freed", id.asText(), rdd));
      } else { // a relation cached some other way: its cache, if any, is the client's to unpersist
        rows.add(row("released", id.asText(), -1));
      }
    }
    return rows;
  }

  static List<Row> handle(Configuration conf, JsonNode request) throws IOException {
    String op = request.path("op").asText();
    List<Row> rows = new ArrayList<>();
    switch (op) {
      case "open": {
        Path path = new Path(request.path("path").asText());
        FileSystem fs = path.getFileSystem(conf);
        rows.add(row("root", fs.makeQualified(path).toString(), 0));
        rows.add(row("class", fs.getClass().getName(), 0));
        for (JsonNode cap : request.path("caps")) {
          rows.add(row("capability", cap.asText(), fs.hasPathCapability(path, cap.asText()) ? 1 : 0));
        }
        break;
      }
      case "qualify":
        for (JsonNode p : request.path("paths")) {
          Path path = new Path(p.asText());
          rows.add(row("path", path.getFileSystem(conf).makeQualified(path).toString(), 0));
        }
        break;
      case "uris":
        for (JsonNode p : request.path("paths")) {
          rows.add(row("uri", new Path(p.asText()).toUri().toString(), 0));
        }
        break;
      case "status": {
        Path path = path(request);
        try {
          FileStatus st = path.getFileSystem(conf).getFileStatus(path);
          String etag = st instanceof EtagSource ? ((EtagSource) st).getEtag() : null;
          rows.add(row(st.isDirectory() ? "dir" : "file", etag, st.getLen()));
        } catch (FileNotFoundException e) {
          // no row: absent
        }
        break;
      }
      case "sizes": // a row per path, in order: its length, or -1 if it is absent
        for (JsonNode p : request.path("paths")) {
          Path path = new Path(p.asText());
          long len;
          try {
            len = path.getFileSystem(conf).getFileStatus(path).getLen();
          } catch (FileNotFoundException e) {
            len = -1;
          }
          rows.add(row("size", p.asText(), len));
        }
        break;
      case "stamps": { // a row per file in each folder of paths: its path, length, and in b (JSON) the folder's
        int i = 0; // index, the file's name, modification time (ms) and ETag (null where the filesystem has none)
        for (JsonNode p : request.path("paths")) {
          Path folder = new Path(p.asText());
          FileStatus[] listed;
          try {
            listed = folder.getFileSystem(conf).listStatus(folder);
          } catch (FileNotFoundException e) {
            listed = new FileStatus[0];
          }
          for (FileStatus st : listed) {
            if (st.isFile()) {
              ObjectNode meta = JSON.createObjectNode().put("i", i).put("name", st.getPath().getName())
                  .put("mtime", st.getModificationTime())
                  .put("etag", st instanceof EtagSource ? ((EtagSource) st).getEtag() : null);
              rows.add(RowFactory.create("file", st.getPath().toString(), st.getLen(),
                  JSON.writeValueAsBytes(meta)));
            }
          }
          i++;
        }
        break;
      }
      case "read": {
        Path path = path(request);
        try (FSDataInputStream in = path.getFileSystem(conf).open(path)) {
          rows.add(RowFactory.create("bytes", null, 0L, IOUtils.readFullyToByteArray(in)));
        } catch (FileNotFoundException e) {
          // no row: absent
        }
        break;
      }
      case "write": {
        Path path = path(request);
        byte[] data = Base64.getDecoder().decode(request.path("data").asText());
        rows.add(row("written", null, write(path.getFileSystem(conf), path, data, request.path("if")) ? 1 : 0));
        break;
      }
      case "put": // whole files, each created or replaced
        for (JsonNode file : request.path("files")) {
          Path path = new Path(file.path(0).asText());
          write(path.getFileSystem(conf), path, Base64.getDecoder().decode(file.path(1).asText()),
              MissingNode.getInstance());
          rows.add(row("written", path.toString(), 1));
        }
        break;
      case "list": {
        Path path = path(request);
        FileSystem fs = path.getFileSystem(conf);
        if (fs.exists(path)) {
          RemoteIterator<LocatedFileStatus> it = fs.listFiles(path, request.path("recursive").asBoolean());
          while (it.hasNext()) {
            LocatedFileStatus st = it.next();
            rows.add(row("file", st.getPath().toString(), st.getLen()));
          }
        }
        break;
      }
      case "children": {
        Path path = path(request);
        FileSystem fs = path.getFileSystem(conf);
        if (fs.exists(path)) {
          for (FileStatus st : fs.listStatus(path)) {
            rows.add(row(st.isDirectory() ? "dir" : st.isFile() ? "file" : "other", st.getPath().toString(),
                st.getLen()));
          }
        }
        break;
      }
      case "glob": {
        Path pattern = path(request);
        FileStatus[] found = pattern.getFileSystem(conf).globStatus(pattern);
        for (FileStatus st : found == null ? new FileStatus[0] : found) {
          rows.add(row("file", st.getPath().toString(), st.getLen()));
        }
        break;
      }
      case "delete": {
        boolean recursive = request.path("recursive").asBoolean();
        for (JsonNode p : request.path("paths")) {
          Path path = new Path(p.asText());
          rows.add(row("deleted", p.asText(), path.getFileSystem(conf).delete(path, recursive) ? 1 : 0));
        }
        break;
      }
      case "decodes": { // a landing file that cannot be decoded at all: a row with why; when it can, a .gz one's
        long[] decoded = {-1}; // decoded length (what its lines add up to, for reprocess.landing.long_lines)
        String problem = decodeProblem(conf, path(request), request.path("fmt").asText(), decoded);
        if (problem != null) {
          rows.add(row("problem", problem, 0));
        } else if (decoded[0] >= 0) {
          rows.add(row("bytes", null, decoded[0]));
        }
        break;
      }
      default:
        throw new IllegalArgumentException("reprocess store plugin: unknown request " + op);
    }
    return rows;
  }

  /** Create or replace {@code path} with {@code data}: always ({@code cond} null), only if absent ({@code cond}
   * {@code true}), or only if its ETag is {@code cond} (a string); false if the condition failed. */
  private static boolean write(FileSystem fs, Path path, byte[] data, JsonNode cond) throws IOException {
    if (cond.isMissingNode() || cond.isNull()) {
      try (OutputStream out = fs.create(path, true)) {
        out.write(data);
      }
      return true;
    }
    FSDataOutputStreamBuilder<?, ?> builder = fs.createFile(path).overwrite(!cond.isBoolean());
    builder = cond.isBoolean() ? builder.must(IF_ABSENT, true) : builder.must(IF_MATCH, cond.asText());
    try {
      OutputStream out = builder.build();
      try {
        out.write(data);
      } finally {
        out.close(); // an object store checks the condition here, when the object is put
      }
    } catch (IOException e) {
      if (e instanceof FileAlreadyExistsException || Arrays.asList(CONFLICTS).contains(e.getClass().getName())) {
        return false;
      }
      throw e;
    }
    return true;
  }

  /**
   * Why a {@code .gz} or Parquet landing file cannot be read at all, or null: as the cycle's driver checks it
   * ({@code reprocess.storage.hadoop_fs.JvmFs.decode_problem}). An error that is no decoding error (the filesystem: a
   * timeout, a 403, a file gone since the listing) is thrown, failing the run for the next run to retry, never
   * taken as corruption. When it can be, a {@code .gz} file's decoded length goes in {@code decoded[0]}.
   */
  static String decodeProblem(Configuration conf, Path path, String fmt, long[] decoded) throws IOException {
    try {
      if ("parquet".equals(fmt)) {
        try (ParquetFileReader reader = ParquetFileReader.open(HadoopInputFile.fromPath(path, conf))) {
          java.util.Set<String> refused = new java.util.TreeSet<>();
          for (BlockMetaData block : reader.getFooter().getBlocks()) {
            for (ColumnChunkMetaData column : block.getColumns()) {
              if (UNREADABLE_PARQUET_CODECS.contains(column.getCodec().name())) {
                refused.add(column.getCodec().name());
              }
            }
          }
          if (!refused.isEmpty()) { // as reprocess.landing.contract.codec_problem says it
            return "not a readable Parquet file: compressed with " + String.join(", ", refused)
                + ", which Spark cannot decompress here (its jars carry no Hadoop codec for it)";
          }
        }
      } else if (path.getName().endsWith(".gz")) {
        CompressionCodec codec = new CompressionCodecFactory(conf).getCodec(path);
        FSDataInputStream raw = path.getFileSystem(conf).open(path);
        InputStream stream;
        try {
          stream = codec.createInputStream(raw);
        } catch (IOException | RuntimeException e) {
          IOUtils.closeStream(raw);
          throw e;
        }
        try {
          decoded[0] = stream.transferTo(OutputStream.nullOutputStream());
        } finally {
          IOUtils.closeStream(stream); // closes raw too
        }
      }
    } catch (IOException | RuntimeException e) {
      if (!doesNotDecode(e)) {
        throw e;
      }
      return ("parquet".equals(fmt) ? "not a readable Parquet file: " : "cannot decompress: ") + e;
    }
    return null;
  }

  /** Whether an exception says the bytes do not decode: an early end, or thrown by a decoder's own frame. */
  private static boolean doesNotDecode(Throwable e) {
    if (e.getClass() == java.io.EOFException.class) {
      return true;
    }
    StackTraceElement[] frames = e.getStackTrace();
    if (frames.length == 0) {
      return false;
    }
    String where = frames[0].getClassName();
    for (String decoder : DECODERS) {
      if (where.startsWith(decoder)) {
        return true;
      }
    }
    return false;
  }

  private static Path path(JsonNode request) {
    return new Path(request.path("path").asText());
  }

  private static Row row(String k, String s, long n) {
    return RowFactory.create(k, s, n, null);
  }

  /**
   * A serialized {@code google.protobuf.Any}: its type URL (field 1) and value (field 2), or null if the bytes are
   * not one. Read by hand, so that nothing here depends on the name the server's jar shades protobuf under.
   */
  static byte[][] parseAny(byte[] bytes) {
    byte[][] out = {new byte[0], new byte[0]};
    int[] pos = {0};
    while (pos[0] < bytes.length) {
      long key = varint(bytes, pos);
      if (key < 0) {
        return null;
      }
      int field = (int) (key >>> 3);
      int wire = (int) (key & 7);
      if (wire == 2) {
        long len = varint(bytes, pos);
        if (len < 0 || pos[0] + len > bytes.length) {
          return null;
        }
        if (field == 1 || field == 2) {
          out[field - 1] = Arrays.copyOfRange(bytes, pos[0], pos[0] + (int) len);
        }
        pos[0] += (int) len;
      } else if (wire == 0) {
        if (varint(bytes, pos) < 0) {
          return null;
        }
      } else {
        return null;
      }
    }
    return out;
  }

  private static long varint(byte[] bytes, int[] pos) {
    long value = 0;
    for (int shift = 0; shift < 64 && pos[0] < bytes.length; shift += 7) {
      byte b = bytes[pos[0]++];
      value |= (long) (b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        return value;
      }
    }
    return -1;
  }
}
