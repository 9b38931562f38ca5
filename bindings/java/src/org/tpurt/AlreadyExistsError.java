package org.tpurt;

/** Status code 6 (TensorFlow's AlreadyExistsError). */
public class AlreadyExistsError extends OpError {
  public AlreadyExistsError(String message) {
    super(6, message);
  }
}
